"""One slurmtower over several local clusters: a ``[[clusters]]`` configuration of devclusters
(the tests of several clusters, ``bench/clusters.py``, ``slurmtower devcluster clusters-config``)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from slurmtower.devcluster.cluster import DevCluster

__all__ = ["clusters_config", "write_clusters_config"]


def clusters_config(clusters: Sequence[DevCluster], state_dir: Path,
                    entries: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The settings of one tower over ``clusters`` (the first the default): the first one's
    slurmtower.toml at the top (its tokens, API, events ...), each cluster's Slurm and
    accounting in its ``[[clusters]]`` entry, plus what ``entries[i]`` adds to the i-th."""
    if not clusters:
        raise ValueError("clusters_config needs at least one cluster")
    tomls = [tomllib.loads(c.tower_conf.read_text()) for c in clusters]
    cfg = {k: v for k, v in tomls[0].items() if k not in ("slurm", "accounting", "cluster_name")}
    cfg["state_dir"] = str(state_dir)
    cfg["clusters"] = [{"name": c.cluster_name, "slurm": t["slurm"], "accounting": t["accounting"],
                        **(entries[i] if i < len(entries) else {})}
                       for i, (c, t) in enumerate(zip(clusters, tomls, strict=True))]
    return cfg


def write_clusters_config(path: Path, clusters: Sequence[DevCluster], state_dir: Path,
                          entries: Sequence[dict[str, Any]] = (), **top: Any) -> Path:
    """:func:`clusters_config` (with ``top`` sections merged in) written to ``path`` as YAML
    (0600: it names the accounting databases' passwords)."""
    cfg = clusters_config(clusters, state_dir, entries)
    for key, value in top.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    os.chmod(path, 0o600)
    return path
