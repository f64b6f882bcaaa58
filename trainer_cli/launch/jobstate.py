"""Moved to :mod:`trainer_cli.job.jobstate`; ``python -m trainer_cli.launch.jobstate`` stays for jobs queued before."""

import sys

from trainer_cli.job.jobstate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
