"""The console's static files, without a browser: shipped as package data, vendored files as
VENDORED.md records them, and a page that runs under ``Content-Security-Policy: default-src
'self'`` (no inline script or style, every referenced file present)."""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "src" / "dpkit" / "server" / "static"


def _files() -> list[str]:
    return sorted(p.relative_to(STATIC.parents[1]).as_posix()  # "server/static/..."
                  for p in STATIC.rglob("*") if p.is_file())


def test_every_console_file_is_package_data() -> None:
    """A non-editable install (``pip install dpkit[server]``) must carry the console: each
    file under static/ matches one of pyproject's package-data patterns (setuptools' ``*``
    does not cross folders, so a new folder needs its own pattern)."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = conf["tool"]["setuptools"]["package-data"]["dpkit"]
    files = _files()
    assert "server/static/index.html" in files
    missing = [f for f in files
               if not any(fnmatch.fnmatchcase(f, p) and "/" not in f[len(p.rsplit("/", 1)[0]) + 1:]
                          for p in patterns if "/" in p)]
    assert not missing, f"add package-data patterns to pyproject.toml for {missing}"


def test_vendored_files_match_their_record() -> None:
    record = (STATIC / "vendor" / "VENDORED.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$", record, flags=re.M)
    assert rows, "VENDORED.md lists no file with its sha256"
    for name, digest in rows:
        data = (STATIC / "vendor" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, f"{name} differs from VENDORED.md"
        assert b"Released under the MIT License" in data[:400], f"{name} lost its licence header"
    vendored = {p.name for p in (STATIC / "vendor").iterdir()} - {"VENDORED.md"}
    assert vendored <= {n for n, _ in rows} | {n for n in vendored if n.startswith("LICENSE")}


def test_the_page_needs_no_inline_code_and_references_only_shipped_files() -> None:
    html = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline <script>: breaks CSP"
    assert "<style" not in html and " style=" not in html, "inline style: breaks CSP"
    assert not re.search(r"\son[a-z]+=", html), "inline event handler: breaks CSP"
    for ref in re.findall(r'(?:src|href)="(static/[^"]+)"', html):
        assert (STATIC.parent / ref).is_file(), f"index.html references missing {ref}"
    for js in (STATIC / "js").glob("*.js"):
        text = js.read_text()
        assert "innerHTML" not in text, f"{js.name}: build DOM with textContent, not innerHTML"
        for imp in re.findall(r'from "\./([^"]+)"', text):
            assert (js.parent / imp).is_file(), f"{js.name} imports missing {imp}"


def test_the_sign_in_form_cannot_put_the_token_in_a_url() -> None:
    """If the script failed, a GET form would submit ``?token=...`` into history and logs."""
    html = (STATIC / "index.html").read_text()
    form = re.search(r'<form id="signin-form"[^>]*>', html)
    assert form and 'method="post"' in form.group(0)
    assert 'type="password"' in html
    api = (STATIC / "js" / "api.js").read_text()
    assert "sessionStorage" in api and "localStorage" not in api


def test_the_scripts_parse() -> None:
    """A syntax error in one module blanks the whole console; say which file, before any
    browser starts (Node's parser, where Node is installed; the browser test catches it too)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the browser test still loads every module")
    for js in sorted((STATIC / "js").glob("*.js")):
        done = subprocess.run([node, "--input-type=module", "--check"], input=js.read_bytes(),
                              capture_output=True, timeout=30, check=False)
        assert done.returncode == 0, f"{js.name}: {done.stderr.decode(errors='replace')}"
