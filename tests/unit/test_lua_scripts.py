"""Every Lua script under escalation/adapters/lua, read as text (no Redis needed).

What "the scripts interpolate no values" means here, checked for every .lua file:

* the script text is fixed: no ``loadstring`` / ``load`` / ``loadfile`` / ``dofile`` /
  ``require`` (no code built at run time), and the Python side sends each file verbatim
  (``register_script(script_source(...))``; no ``eval``/``evalsha`` of built text);
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

ROOT = Path(__file__).resolve().parents[2]
LUA_DIR = ROOT / "escalation/adapters/lua"
SCRIPTS = sorted(p.stem for p in LUA_DIR.glob("*.lua"))

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
    return (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")


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
    assert len(SCRIPTS) >= 12  # every file in adapters/lua (a glob that found none would pass)
    assert {"claim", "apply", "enqueue", "cancel"} <= set(SCRIPTS)


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
