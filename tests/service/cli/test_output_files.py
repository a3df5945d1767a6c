"""Where `recommend` writes: `-o` replaces a file whole or not at all (through links, into pipes, keeping its
permissions), `-o -` and `/dev/stdout` carry the config alone, and a failed write is one error line."""

from __future__ import annotations

import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from service.cli.app import main
from service.validate.document import validate_text
from tests.cli import TINY_ON_CPU, run_cli
from tests.paths import REPO


def _recommend_to(out: Path, file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "service.cli.app", "recommend", "--model", "llama3-8b", "--gpus", "8",
           "--gpu-type", "h100", "--goal", "sft", "--engine", "bundled", "-o", str(out)]

    def limit() -> None:  # the disk "fills" after this many bytes
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(cmd, preexec_fn=limit if file_size_limit else None, capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=120)


def _recommend_in_process(out: Path) -> int:
    return main(["recommend", "--model", "tiny-llama", "--gpus", "1", "--gpu-type", "cpu", "--engine", "bundled",
                 "-o", str(out)])


def test_a_failed_recommend_write_keeps_the_old_file(tmp_path):
    out = tmp_path / "config.yaml"
    out.write_text("model:\n  pretrained_model_name_or_path: keep-me\n")
    result = _recommend_to(out, file_size_limit=1024)
    assert result.returncode == 2 and "the file is as it was" in result.stderr, result.stderr
    assert out.read_text() == "model:\n  pretrained_model_name_or_path: keep-me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # no staging file left behind


def test_recommend_writes_through_a_symlink_and_into_a_pipe(tmp_path):
    target = tmp_path / "real.yaml"
    target.write_text("old\n")
    (tmp_path / "link.yaml").symlink_to(target)
    assert _recommend_to(tmp_path / "link.yaml").returncode == 0
    assert (tmp_path / "link.yaml").is_symlink() and "pretrained_model_name_or_path" in target.read_text()
    fifo = tmp_path / "fifo"  # a pipe of the test's own, never a device of the host's
    os.mkfifo(fifo)
    read = []
    reader = __import__("threading").Thread(target=lambda: read.append(fifo.read_text()))
    reader.start()
    assert _recommend_to(fifo).returncode == 0
    reader.join(timeout=60)
    assert fifo.exists() and not fifo.is_file() and "pretrained_model_name_or_path" in read[0]


@pytest.mark.parametrize("redirect", ["w", "a"])
def test_o_dev_stdout_into_a_file_keeps_what_the_shell_opened(tmp_path, redirect):
    """/dev/stdout redirected to a file was replaced by a new file, and the summary lost."""
    log = tmp_path / "log.txt"
    log.write_text("earlier\n")
    with open(log, redirect) as fh:
        subprocess.run([sys.executable, "-m", "service.cli.app", "recommend", "--model", "tiny-llama", "--gpus", "1",
                        "--gpu-type", "cpu", "--engine", "bundled", "--goal", "sft", "-o", "/dev/stdout"],
                       stdout=fh, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True, timeout=120)
    text = log.read_text()
    assert text.startswith("earlier\n") == (redirect == "a")
    config = text.removeprefix("earlier\n")  # as `-o -`: the config alone, the summary on stderr
    assert "pretrained_model_name_or_path" in config and "\nlayout: TP" not in config
    assert not [f for f in validate_text(config, "c.yaml").findings if f.severity == "error"]


def test_o_through_a_symlink_loop_is_a_clean_error(tmp_path, capsys):
    """Path.resolve raised RuntimeError (a traceback, exit 1)."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert _recommend_in_process(tmp_path / "a") == 2
    assert "cannot write" in capsys.readouterr().err


def test_a_writable_file_in_a_folder_without_room_for_staging_is_written_in_place(tmp_path, monkeypatch, capsys):
    """A group-writable config in a read-only folder was refused, blaming the file."""
    import errno

    out = tmp_path / "c.yaml"
    out.write_text("old\n")
    real_open = os.open

    def no_new_files(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(path) != str(out):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_new_files)
    assert _recommend_in_process(out) == 0
    assert "pretrained_model_name_or_path" in out.read_text() and "written in place" in capsys.readouterr().err


def test_a_failed_folder_sync_after_the_rename_says_the_new_config_is_in_place(tmp_path, monkeypatch, capsys):
    """It said "the file is as it was" about a file that held the new config."""
    import errno

    import trainer.contract.atomic_files as files

    def failing(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(files, "fsync_path", failing)
    out = tmp_path / "c.yaml"
    out.write_text("old\n")
    assert _recommend_in_process(out) == 2
    assert "the new config is in place" in capsys.readouterr().err and out.read_text() != "old\n"
    monkeypatch.setattr(files, "fsync_path", lambda path: (_ for _ in ()).throw(OSError(errno.EINVAL, "no")))
    out.write_text("old\n")
    assert _recommend_in_process(out) == 0  # a filesystem that cannot sync folders at all


def test_recommend_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    out = tmp_path / "private.yaml"
    out.write_text("old\n")
    out.chmod(0o600)
    assert _recommend_to(out).returncode == 0
    assert out.stat().st_mode & 0o777 == 0o600 and "pretrained_model_name_or_path" in out.read_text()


def test_an_empty_output_name_is_refused(capsys):
    args = ["recommend", "--model", "tiny-llama", "--gpus", "1", "--gpu-type", "cpu", "--engine", "bundled", "-o", ""]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "empty file name" in captured.err and captured.out == ""


def test_an_unwritable_stdout_is_one_error_line():
    """`recommend --format json > /dev/full` ended in a traceback."""
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "service.cli.app", "recipes"], stdout=full,
                                stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                timeout=120)
    assert result.returncode == 2 and result.stderr == "error: cannot write the output: No space left on device\n"


def test_o_dev_stdout_with_json_is_refused_like_o_dash(capsys):
    """YAML then JSON on one stdout."""
    assert main(["recommend", "--model", "tiny-llama", "--gpus", "1", "--gpu-type", "cpu", "--engine", "bundled",
                 "-o", "/dev/stdout", "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "-o /dev/stdout: --format json writes its JSON to stdout" in captured.err


def test_o_dev_stdout_writes_to_the_stdout_of_now(capsys):
    """The stream of import time was written."""
    assert _recommend_in_process(Path("/dev/stdout")) == 0
    assert "pretrained_model_name_or_path" in capsys.readouterr().out


def test_a_failed_in_place_write_does_not_claim_the_old_file(tmp_path, monkeypatch, capsys):
    import errno

    import service.cli.recommend as cli_recommend

    out = tmp_path / "c.yaml"
    out.write_text("old\n")

    def no_staging(path, text):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    def disk_full(self, text, encoding=None):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli_recommend, "write_atomic", no_staging)
    monkeypatch.setattr(Path, "write_text", disk_full)
    assert _recommend_in_process(out) == 2
    err = capsys.readouterr().err
    assert "it may hold part of the new config" in err and "as it was" not in err


def test_a_command_error_without_a_file_is_not_called_a_stdout_failure(monkeypatch):
    """A TimeoutError became "cannot write the output"."""
    import service.cli.plan as cli_plan

    def timed_out(args):
        raise TimeoutError(110, "Connection timed out")

    monkeypatch.setattr(cli_plan, "run", timed_out)
    with pytest.raises(TimeoutError):
        main(["plan", "--model", "llama3-8b", "--gpus", "8", "--gpu-type", "h100"])


@pytest.mark.parametrize("output, redirect", [("/dev/full", None), ("/dev/stderr", "/dev/full")])
def test_a_write_error_on_a_device_is_one_line_not_a_read_of_the_device(output, redirect):
    """The error message read the device back to compare, which never ends on /dev/full."""
    def limited() -> None:  # a read that never ends fails fast instead of taking the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    with open(redirect or os.devnull, "w") as err_sink:
        done = subprocess.run([sys.executable, "-m", "service.cli.app", "recommend", "--model", "llama3-8b", "--gpus",
                               "8", "--gpu-type", "h100", "-o", output], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=err_sink if redirect else subprocess.PIPE, text=True, timeout=120,
                              preexec_fn=limited, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if redirect is None:
        assert done.returncode == 2 and "cannot write /dev/full" in done.stderr and "MemoryError" not in done.stderr
    else:
        assert done.returncode in (1, 2)  # stderr itself is full, so no message gets out; it must end, not hang or OOM


def test_dash_output_writes_the_yaml_to_stdout_and_the_summary_to_stderr(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "recommend", *TINY_ON_CPU, "-o", "-")
    assert code == 0
    assert list(tmp_path.iterdir()) == []  # no file named `-`
    config = yaml.safe_load(out)
    assert config["hardware"]["gpus_per_node"] == 2 and config["model"]["pretrained_model_name_or_path"]
    assert "## " not in out and "layout:" not in out  # the summary is not in the YAML stream
    assert "layout: TP 1" in err
    # the commands name the file the user is told to save to, never `-`
    assert "read it as config.yaml: save it there" in err
    assert "recipe-advisor train config.yaml --nproc-per-node 2" in err
    assert "train -" not in err and "trainer -" not in err


def test_dash_output_pipes_into_diff(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(capsys, "recommend", *TINY_ON_CPU, "-o", "base.yaml")[0] == 0
    code, out, _ = run_cli(capsys, "recommend", *TINY_ON_CPU, "--optimizer.lr", "1e-4", "-o", "-")
    assert code == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(out.encode())))
    code, diff_out, err = run_cli(capsys, "diff", "base.yaml", "-", "--format", "json")
    assert code == 0, err
    changes = json.loads(diff_out)["changes"]
    assert [(c["key"], c["new"]) for c in changes] == [("optimizer.lr", 1e-4)]


def test_dash_output_with_json_format_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "recommend", *TINY_ON_CPU, "-o", "-", "--format", "json")
    assert code == 2 and out == "" and list(tmp_path.iterdir()) == []
    assert "error: -o -: --format json writes its JSON to stdout" in err
