"""``dpkit owner-token`` and ``dpkit serve``'s refusals (the running service: test_live.py)."""

from __future__ import annotations

import re
from typing import Any

from click.testing import CliRunner
from tests.server.conftest import Project

from dpkit.cli import main


def flat(text: str) -> str:  # rich wraps long lines
    return " ".join(text.split())


def test_owner_token_prints_once_and_stores_the_hash(project: Project) -> None:
    from dpkit.server.auth import owner_hashes, sha256_hex

    out = CliRunner().invoke(main, ["owner-token", str(project.path)])
    assert out.exit_code == 0, out.output
    (token,) = re.findall(r"dpkit_owner_[0-9a-f]{64}", out.output)
    assert owner_hashes(project.path) == (sha256_hex(token),)
    assert token not in (project.path / "owner-token.sha256").read_text()


def test_serve_refuses_bad_settings_before_starting(project: Project, tmp_path: Any,
                                                    monkeypatch: Any) -> None:
    runner = CliRunner()
    for args, text in [(["--workers", "0"], "--workers"),
                       (["--ssl-keyfile", "k.pem"], "both --ssl-keyfile and --ssl-certfile"),
                       (["--rate", "0"], "rate must be"),
                       (["--max-body", "10"], "max_body"),
                       (["--answer-deadline-ms", "-1"], "answer_deadline_ms must be"),
                       (["--answer-class-factor", "1"], "answer_class_factor must be"),
                       (["--fit-timeout", "0"], "fit_timeout must be"),
                       (["--answers-max-age", "-1"], "answers_max_age must be"),
                       (["--answers-store", "postgres"], "needs --answers-dsn"),
                       (["--answers-kept", "0", "--init-owner-token"], "answers_kept")]:
        hashes = (project.path / "owner-token.sha256").read_text()
        out = runner.invoke(main, ["serve", str(project.path), *args])
        assert out.exit_code == 2 and text in flat(out.output), (args, out.output)
        assert (project.path / "owner-token.sha256").read_text() == hashes  # not replaced
    monkeypatch.setenv("DPKIT_TOKEN", project.alice)
    out = runner.invoke(main, ["serve", str(project.path)])
    assert out.exit_code == 2 and "unset DPKIT_TOKEN" in flat(out.output)
    monkeypatch.delenv("DPKIT_TOKEN")
    out = runner.invoke(main, ["owner-token", str(tmp_path)])
    assert out.exit_code == 2 and "not a dpkit project" in flat(out.output)


def test_serve_prints_its_timing_classes(project: Project, monkeypatch: Any) -> None:
    """The classes answers leave at are public: the owner sees them when the service starts."""
    from tests.server.conftest import free_port

    from dpkit.server import run

    started: list[Any] = []
    monkeypatch.setattr(run, "serve", lambda config, **kw: started.append(config))
    base = ["serve", str(project.path), "--port", str(free_port()), "--timeout", "5"]
    out = CliRunner().invoke(main, [*base, "--answer-deadline-ms", "1000"])
    assert out.exit_code == 0, out.output
    assert "4 timing classes: 1000, 2000, 4000, 5000 ms" in flat(out.output)
    assert started[0].answer_deadline_ms == 1000 and started[0].answer_class_factor == 2
    out = CliRunner().invoke(main, [*base, "--answer-deadline-ms", "0"])
    assert out.exit_code == 0 and "no timing classes" in flat(out.output)


def test_dpkit_and_its_client_import_no_web_stack() -> None:
    import subprocess
    import sys

    from tests.server.conftest import SRC

    code = ("import sys, dpkit; dpkit.Client; import dpkit.server.client; "
            "print([m for m in ('fastapi', 'uvicorn', 'starlette', 'pydantic', 'jwt') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC), "PATH": ""}, check=True)
    assert out.stdout.strip() == "[]"


def test_serve_refuses_a_busy_port_before_making_an_owner_token(project: Project) -> None:
    """The first hour's owner started a second service on the same port: uvicorn failed after
    startup (exit 3), and --init-owner-token had already replaced the owner's token."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        before = sorted(p.name for p in project.path.iterdir())
        out = CliRunner().invoke(main, ["serve", str(project.path), "--port", str(port),
                                        "--init-owner-token"])
    assert out.exit_code == 2, out.output
    assert f"cannot listen on 127.0.0.1:{port}" in flat(out.output)
    assert "--port" in flat(out.output) and "dpkit_owner_" not in out.output
    assert sorted(p.name for p in project.path.iterdir()) == before  # no owner token made
    out = CliRunner().invoke(main, ["serve", str(project.path), "--workers", "0",
                                    "--init-owner-token"])
    assert out.exit_code == 2 and "dpkit_owner_" not in out.output, out.output
    assert sorted(p.name for p in project.path.iterdir()) == before
