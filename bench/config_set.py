"""A config file with `--set section.key=value` overrides, read as
elasticpipe reads them (the value as TOML, a bare word as a string): shared
by bench/gpu_vs_pytorch.py and bench/pytorch_peer.py."""
import tomllib


def load_config(path, sets):
    """The TOML at `path` with each of `sets` applied; ValueError naming what is wrong."""
    try:
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    for assignment in sets:
        key, eq, text = assignment.partition("=")
        if not eq or "." not in key.strip():
            raise ValueError(f"--set {assignment!r}: expected section.key=value (e.g. planner.alpha=0.5)")
        try:
            value = tomllib.loads("v = " + text)["v"]
        except tomllib.TOMLDecodeError:
            value = text  # a bare word is a string
        *path_keys, last = key.strip().split(".")
        node = cfg
        for part in path_keys:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"--set {assignment!r}: '{part}' is not a section")
        if isinstance(node.get(last), dict) and not isinstance(value, dict):
            raise ValueError(f"--set {assignment!r}: '{key.strip()}' is a section, not a key")
        node[last] = value
    return cfg
