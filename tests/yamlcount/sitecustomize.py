# Copied from /work/shared/tools/yamlcount/sitecustomize.py (the shared YAML-crossing counter; kept here as a
# test support file: tests/test_yaml_crossings.py puts this folder on PYTHONPATH). Unchanged below this note.
# Counts YAML document crossings (text -> tree loads, tree -> text dumps) in one process: calls of PyYAML's
# load/dump families whose input is a document (a load of more than one line or over 64 characters, a dump
# of a mapping or list), not one flag's scalar value that jsonargparse parses as YAML. Each call is charged
# to the nearest frame outside yaml/, jsonargparse/, omegaconf/ and hydra/ (so "trainer_cli" when the
# launcher asked for it, directly or through jsonargparse). Written to YAML_OUT at exit as
# "<loads> <dumps> <loads by trainer_cli> <dumps by trainer_cli> <top call sites...>", one file per process
# (YAML_OUT.<pid>). Usage, from a project's folder:
#   PYTHONPATH=<this folder>:. YAML_OUT=$TMPDIR/y/fit python main.py fit --trainer.max_epochs 1
#   cat $TMPDIR/y/fit.*        # add the first two numbers of every process for the total
import atexit, collections, os, sys
if os.environ.get("YAML_OUT"):
    import yaml
    counts = collections.Counter()
    sites = collections.Counter()
    LIBS = ("/yaml/", "/jsonargparse/", "/omegaconf/", "/hydra/", "yamlcount")
    def who():
        f = sys._getframe(2)
        while f is not None and any(s in f.f_code.co_filename for s in LIBS):
            f = f.f_back
        if f is None:
            return "?", "?"
        path = f.f_code.co_filename
        owner = "trainer_cli" if "/trainer_cli/" in path else "other"
        return owner, f"{path.split('/trainer_cli/')[-1] if owner == 'trainer_cli' else os.path.basename(path)}:{f.f_lineno}"
    def is_doc(x):
        if hasattr(x, "read"):
            return True
        if isinstance(x, bytes):
            x = x.decode("utf-8", "replace")
        return isinstance(x, str) and ("\n" in x.strip() or len(x) > 64)
    def wrap(name, kind):
        orig = getattr(yaml, name, None)
        if orig is None:
            return
        def counted(*a, **k):
            arg = a[0] if a else next(iter(k.values()), None)
            doc = is_doc(arg) if kind == "load" else isinstance(arg, (dict, list))
            if doc:
                owner, site = who()
                counts[kind] += 1
                if owner == "trainer_cli":
                    counts[kind + "_tc"] += 1
                    sites[f"{kind}@{site}"] += 1
            return orig(*a, **k)
        setattr(yaml, name, counted)
    for n in ("load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all"):
        wrap(n, "load")
    for n in ("dump", "safe_dump", "dump_all", "safe_dump_all"):
        wrap(n, "dump")
    def out():
        with open(os.environ["YAML_OUT"] + f".{os.getpid()}", "w") as f:
            f.write(f"{counts['load']} {counts['dump']} {counts['load_tc']} {counts['dump_tc']} "
                    + " ".join(f"{k}={v}" for k, v in sites.most_common(20)) + "\n")
    atexit.register(out)
