"""datakit's map/shuffle engine: a lazy Dataset over sharded data, zstd-frame shuffle files with sidecar
indexes, pluggable backends (local process pool, inline, Ray). Imports nothing from datakit but the
foundation, `datakit.core`."""

from datakit.core.listing import FileInfo, list_files

from .backend_base import Capabilities
from .backends import backend_capabilities
from .context import ShardInfo, counters, current_shard
from .dataset import Dataset
from .executor import ExecConfig, RunResult, ShardFailed, StageStats, WorkerDeaths, format_stats
from .io import read_jsonl, read_parquet, read_text
from .keys import KeyEncodingError, decode_key, encode_key, route
from .plan import PlanError
from .sizing import SMALL_JOB_BYTES, small_job_config, small_job_config_for_files

__all__ = [
    "Capabilities", "backend_capabilities", "Dataset", "ExecConfig", "RunResult", "ShardFailed", "StageStats", "WorkerDeaths", "format_stats",
    "FileInfo", "list_files", "read_jsonl", "read_parquet", "read_text", "counters", "current_shard",
    "ShardInfo", "KeyEncodingError", "encode_key", "decode_key", "route", "PlanError", "SMALL_JOB_BYTES",
    "small_job_config", "small_job_config_for_files",
]
