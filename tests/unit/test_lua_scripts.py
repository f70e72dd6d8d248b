"""Every Lua script under escalation/adapters/lua, read as text (no Redis needed).

What "the scripts interpolate no values" means here, checked for every .lua file:

* the script text is fixed: no ``loadstring`` / ``load`` / ``loadfile`` / ``dofile`` /
  ``require`` (no code built at run time), and the Python side sends each file as
  ``script_source`` loads it, its ``-- @include`` lines replaced by the shared helpers of
  ``lua/includes/`` (``register_script(script_source(...))``; no ``eval``/``evalsha`` of
  built text); the checks below read that loaded text;
* a helper function is defined in one file only: shared ones in ``lua/includes/``, included
  where they are needed, and inserted once per script;
* every Redis command name is a string literal (``redis.call('ZADD', ...)``): no command
  chosen or built from ARGV;
* every key a command touches is a KEYS element, directly or through a local bound only to
  KEYS elements (ADR 0002: Redis Cluster must see every key in KEYS); a key is never
  concatenated or derived from ARGV;
* every ``KEYS[..]`` / ``ARGV[..]`` the body uses is documented in the header, which names
  KEYS, ARGV, ``Returns:`` and ``Errors:``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from escalation.adapters import redis_scheduler
from escalation.adapters.redis_scheduler import INCLUDE, script_source

ROOT = Path(__file__).resolve().parents[2]
LUA_DIR = ROOT / "escalation/adapters/lua"
SCRIPTS = sorted(p.stem for p in LUA_DIR.glob("*.lua"))
HELPERS = sorted(p.stem for p in (LUA_DIR / "includes").glob("*.lua"))
FUNCTION_DEF = re.compile(r"^\s*(?:local\s+)?function\s+([A-Za-z_][A-Za-z0-9_.:]*)", re.MULTILINE)

# Key positions (1-based among the arguments after the command name) of the commands the
# scripts may use; "all" = every argument is a key. A command missing here fails the test:
# add it with its key positions from the Redis command reference.
KEY_POSITIONS: dict[str, tuple[int, ...] | str] = {
    "TIME": (),
    "GET": (1,), "SET": (1,), "DEL": "all", "EXISTS": "all", "INCR": (1,), "INCRBY": (1,),
    "PEXPIRE": (1,),
    "HGET": (1,), "HMGET": (1,), "HSET": (1,), "HDEL": (1,), "HGETALL": (1,), "HINCRBY": (1,),
    "ZADD": (1,), "ZREM": (1,), "ZSCORE": (1,), "ZRANGE": (1,), "ZRANGEBYSCORE": (1,),
    "ZCARD": (1,), "ZREMRANGEBYRANK": (1,),
    "LPUSH": (1,), "LTRIM": (1,),
    "XADD": (1,), "XACK": (1,),
}
KEYS_EXPR = re.compile(r"KEYS\[[^\[\]]+\]")
NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _source(name: str) -> str:
    """The script as Redis receives it (its includes expanded)."""
    return script_source(name)


def _strip_comments(text: str) -> str:
    """The code without ``--`` comments (string literals kept; no long strings in use)."""
    out, quote, i = [], "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\":
                out.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif text.startswith("--", i):
            assert not text.startswith("--[[", i), "long comments are not parsed"
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets and string literals."""
    parts, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _calls(code: str) -> list[list[str]]:
    """The argument lists of every ``redis.call(...)`` / ``redis.pcall(...)``."""
    found = []
    for m in re.finditer(r"redis\.p?call\s*\(", code):
        depth, quote, j = 1, "", m.end()
        while depth:
            ch = code[j]
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            j += 1
        found.append(_split_top(code[m.end():j - 1]))
    assert len(found) == len(re.findall(r"redis\.p?call", code)), "redis.call not called"
    return found


def _assignments(code: str) -> list[tuple[str, str]]:
    """(target, value) pairs of every assignment, multiple assignments paired up, plus
    ``field = value`` entries of table constructors as (``.field``, value)."""
    pairs = []
    for line in code.splitlines():
        m = re.match(rf"\s*(?:local\s+)?((?:{NAME}(?:\.{NAME})*\s*,\s*)*{NAME}(?:\.{NAME})*)"
                     r"\s*=(?!=)\s*(.+)$", line)
        if m:
            targets = [t.strip() for t in m.group(1).split(",")]
            values = _split_top(m.group(2))
            pairs += [(t, values[k] if k < len(values) else "nil")
                      for k, t in enumerate(targets)]
        for tm in re.finditer(r"[{,]\s*(" + NAME + r")\s*=(?!=)\s*([^,}]+)", line):
            pairs.append(("." + tm.group(1), tm.group(2).strip()))
    return pairs


def _key_names(code: str) -> set[str]:
    """Names (and ``.field`` suffixes) bound to a KEYS element, each of whose assignments
    (anywhere in the script) is a bare KEYS element."""
    pairs = _assignments(code)
    bound = {t for t, v in pairs if KEYS_EXPR.fullmatch(v)}
    for target, value in pairs:
        if target in bound:
            assert KEYS_EXPR.fullmatch(value), f"key variable {target} is also set to {value}"
    return bound


def _is_key(arg: str, names: set[str]) -> bool:
    if KEYS_EXPR.fullmatch(arg) or arg in names:
        return True
    field = re.fullmatch(rf"{NAME}(\.{NAME})", arg)
    return field is not None and field.group(1) in names


def test_every_lua_file_is_checked() -> None:
    assert len(SCRIPTS) >= 11  # every file in adapters/lua (a glob that found none would pass)
    assert {"claim", "apply", "enqueue", "cancel"} <= set(SCRIPTS)
    assert {"fail", "is_int"} <= set(HELPERS)


def test_no_helper_function_is_defined_in_two_files() -> None:
    """A function written twice drifts; a shared one lives in lua/includes/ once."""
    where: dict[str, list[str]] = {}
    files = [LUA_DIR / f"{n}.lua" for n in SCRIPTS]
    files += [LUA_DIR / "includes" / f"{n}.lua" for n in HELPERS]
    for path in files:
        code = _strip_comments(path.read_text(encoding="utf-8"))
        for fn in FUNCTION_DEF.findall(code):
            where.setdefault(fn, []).append(path.relative_to(LUA_DIR).as_posix())
    twice = {fn: paths for fn, paths in where.items() if len(paths) > 1}
    assert not twice, f"defined in more than one Lua file: {twice}"
    assert {"fail", "is_int"} <= set(where)


@pytest.mark.parametrize("name", SCRIPTS)
def test_loaded_script_has_no_include_left_and_each_function_once(name: str) -> None:
    text = _source(name)
    assert not INCLUDE.search(text)
    raw = (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")
    for helper in INCLUDE.findall(raw):
        assert f"-- includes/{helper}.lua: " in text
    defs = FUNCTION_DEF.findall(_strip_comments(text))
    assert len(defs) == len(set(defs)), f"{name}.lua defines a function twice: {defs}"


@pytest.mark.parametrize("name", HELPERS)
def test_every_helper_is_included_somewhere_and_uses_no_keys(name: str) -> None:
    text = (LUA_DIR / "includes" / f"{name}.lua").read_text(encoding="utf-8")
    assert text.startswith(f"-- includes/{name}.lua: ")
    assert not re.search(r"\b(KEYS|ARGV)\b", _strip_comments(text))
    users = [s for s in SCRIPTS
             if name in INCLUDE.findall((LUA_DIR / f"{s}.lua").read_text(encoding="utf-8"))]
    assert users, f"includes/{name}.lua is included by no script"


def test_a_helper_included_twice_is_inserted_once_and_a_cycle_raises(
        monkeypatch: pytest.MonkeyPatch) -> None:
    files = {
        ("includes", "a.lua"): '-- includes/a.lua: a\n-- @include "b"\nlocal function a() end\n',
        ("includes", "b.lua"): "-- includes/b.lua: b\nlocal function b() end\n",
        ("includes", "c.lua"): '-- includes/c.lua: c\n-- @include "d"\n',
        ("includes", "d.lua"): '-- includes/d.lua: d\n-- @include "c"\n',
    }
    monkeypatch.setattr(redis_scheduler, "_lua_file", lambda *parts: files[parts])
    text = redis_scheduler._expand('-- @include "a"\n-- @include "b"\nreturn 1\n', set(), ("s",))
    assert text.count("local function b()") == 1
    assert text.index("local function b()") < text.index("local function a()")
    with pytest.raises(ValueError, match="c -> d -> c"):
        redis_scheduler._expand('-- @include "c"\n', set(), ("s",))


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_builds_no_code_at_run_time(name: str) -> None:
    code = _strip_comments(_source(name))
    for word in ("loadstring", "load", "loadfile", "dofile", "require", "setfenv", "_G"):
        assert not re.search(rf"\b{word}\b", code), f"{name}.lua uses {word}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_command_is_a_literal_and_every_key_is_declared_in_keys(name: str) -> None:
    code = _strip_comments(_source(name))
    names = _key_names(code)
    calls = _calls(code)
    assert calls, f"{name}.lua calls no Redis command"
    for args in calls:
        cmd = re.fullmatch(r"'([A-Z]+)'", args[0])
        assert cmd, f"{name}.lua: command {args[0]!r} is not a string literal"
        positions = KEY_POSITIONS.get(cmd.group(1))
        assert positions is not None, f"{name}.lua: add {cmd.group(1)} to KEY_POSITIONS"
        keys = args[1:] if positions == "all" else [args[p] for p in positions]
        assert keys or positions == (), f"{name}.lua: {cmd.group(1)} without a key"
        for key in keys:
            assert _is_key(key, names), (
                f"{name}.lua: {cmd.group(1)} on {key!r}, which is not a KEYS element")


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_lua_file_opens_with_a_complete_header(name: str) -> None:
    lines = _source(name).splitlines()
    assert lines[0].startswith(f"-- {name}.lua: ")
    header_lines = [line for line in lines if line.startswith("--")]
    header = "\n".join(header_lines)
    body = _strip_comments(_source(name))
    assert "KEYS[1]" in header
    assert any(re.match(r"--\s+ARGV\b", line) for line in header_lines), "no ARGV line"
    assert "Returns:" in header
    assert "Errors:" in header
    for ref in set(re.findall(r"(?:KEYS|ARGV)\[\d+\]", body)):
        assert ref in header, f"{name}.lua uses {ref} without documenting it"


def test_python_sends_every_script_verbatim() -> None:
    registered = 0
    for path in (ROOT / "escalation").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for word in (".eval(", ".evalsha(", ".script_load(", ".fcall("):
            assert word not in text, f"{path.relative_to(ROOT)} runs Lua text with {word}"
        for m in re.finditer(r"register_script\(([^()]*(?:\([^()]*\))?[^()]*)\)", text):
            assert re.fullmatch(r"script_source\((\"[a-z_]+\"|\w+)\)", m.group(1).strip()), (
                f"{path.relative_to(ROOT)} registers {m.group(1)!r}, not a file's text")
            registered += 1
    assert registered >= 3
