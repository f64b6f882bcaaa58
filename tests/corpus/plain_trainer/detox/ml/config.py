import os
from dataclasses import dataclass


@dataclass
class Config:
    cache_dir: str = os.environ.get("DETOX_CACHE", "cache")
    log_dir: str = "logs"
    ckpt_dir: str = "checkpoints"


CONFIG = Config()
