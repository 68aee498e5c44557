"""The feedq command on a store (here, beside the loopback S3 server its
fixtures start): make-data --output to a bucket, bench and inspect on URLs
-- the same bytes and counts as on local disk."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from feedq.cli import main
from feedq.cli._inspect import inspect_file
from tests.storage.conftest import SECRET, Bucket

pytestmark = pytest.mark.timeout(60)


def feedq(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in a subprocess (a fresh process: its own S3 client)."""
    return subprocess.run([sys.executable, "-m", "feedq.cli", *args], check=False,
                          capture_output=True, text=True, timeout=50,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))


def here(*args: str) -> Result:
    """The command in this process (quicker)."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_make_data_bench_and_inspect_on_a_bucket(tmp_path: Path, s3: Bucket) -> None:
    args = ["--format", "tfrecord", "--layout", "realistic", "--records", "3000", "--files", "3",
            "--compression", "gzip", "--seed", "5"]
    made = feedq("make-data", s3.url("sets/tf"), *args)
    assert made.returncode == 0, made.stderr
    assert here("make-data", str(tmp_path / "tf"), *args).exit_code == 0
    local = sorted((tmp_path / "tf").iterdir())
    listed = s3.client.list_objects_v2(Bucket=s3.name, Prefix="sets/tf/")["Contents"]
    assert [o["Key"] for o in listed] == [f"sets/tf/{p.name}" for p in local]
    for p in local:  # the bytes of the local run, uploaded unchanged
        body = s3.client.get_object(Bucket=s3.name, Key=f"sets/tf/{p.name}")["Body"].read()
        assert body == p.read_bytes()
    again = here("make-data", s3.url("sets/tf"), *args)
    assert again.exit_code != 0 and "exists" in again.stderr and "--force" in again.stderr

    bench = feedq("bench", s3.url("sets/tf"), "--json", "--batch-size", "100")
    assert bench.returncode == 0, bench.stderr
    assert SECRET not in bench.stdout + bench.stderr
    for target in (s3.url("sets/tf"), s3.url("sets/tf/*.tfrecord.gz")):
        bench = here("bench", target, "--json", "--batch-size", "100", "--no-progress")
        assert bench.exit_code == 0, bench.output
        result = json.loads(bench.stdout)
        assert result["files"] == 3 and result["records"] == 3000
        assert result["stopped_by"] == "end of data" and result["skipped_errors"] == 0
        store = result["storage"]  # the remote reads of this run
        assert store["files_opened"] >= 3 and store["requests"] >= 6 and store["retries"] == 0
        assert store["bytes"] >= sum(p.stat().st_size for p in local)
    table = here("bench", s3.url("sets/tf"), "--batch-size", "100", "--no-progress")
    assert table.exit_code == 0 and re.search(r"store: \d+ requests, [\d.]+ MB, 0 retries",
                                              table.stdout), table.output

    remote = inspect_file(s3.url(f"sets/tf/{local[0].name}"), "tfrecord", "GZIP", record_bytes=None,
                          sample=500, head=2, on_error="raise")
    ours = inspect_file(str(local[0]), "tfrecord", "GZIP", record_bytes=None, sample=500, head=2,
                        on_error="raise")
    assert remote["schema"] == ours["schema"]
    url = s3.url(f"sets/tf/{local[0].name}")
    assert json.dumps(remote["first_records"]).replace(url, str(local[0])) == json.dumps(
        ours["first_records"])
    shown = here("inspect", s3.url(f"sets/tf/{local[0].name}"), "--json")  # format detected
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["schema"] == ours["schema"]
    cmp = here("bench", s3.url("sets/tf"), "--compare")
    assert cmp.exit_code != 0 and "--compare reads local files only" in cmp.output
    gone = here("bench", s3.url("sets/none/"), "--json")
    assert gone.exit_code != 0 and s3.url("sets/none/") in gone.stderr
