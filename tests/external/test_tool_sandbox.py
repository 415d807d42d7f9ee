"""The tools whose calls run in the code judge's sandbox (tools.sandbox: bwrap): the Python tool's sessions (state
across a sample's calls, never across samples; a bare expression's value; exceptions; the time limit) and a user's
own ``module:function``, and the calls a hostile model would write: reading the job's secrets and files, reaching
the network. Each call is one sandboxed run (a tenth of a second); the time limits are a second."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

import pytest

from snakeskills.errors import SnakeskillsError
from snakeskills.settings.tools import Tools
from snakeskills.tools.registry import check_tool, new_session

pytestmark = pytest.mark.usefixtures("bubblewrap")


def tool_settings(tool: str, **settings) -> Tools:
    """The ``tools`` section of ``tool`` with ``settings``, the schema's defaults (sandbox bwrap) filling the rest."""
    return Tools.filled({"tool": tool, **settings}, "tools")


PYTHON = tool_settings("python", timeout_seconds=5)


def call(session, text: str):
    """One call whose sandboxed run finished (no time limit reached)."""
    result = session.call(text)
    assert not result.timeout, result
    return result


# ---------------------------------------------------------------- a Python session


def test_a_session_keeps_its_state_across_calls():
    with new_session(PYTHON) as session:
        assert call(session, "x = 41\nprint('defined')").output == "defined\n"
        second = call(session, "print(x + 1)")
        assert (second.output, second.error) == ("42\n", False)  # the first call's print is not shown again
        assert call(session, "def twice(n):\n    return 2 * n").output == ""
        assert call(session, "print(twice(x))").output == "82\n"


def test_a_bare_last_expression_shows_its_value():
    with new_session(PYTHON) as session:
        assert call(session, "2+3").output == "5\n"
        assert call(session, "name = 'tool'\nname.upper()").output == "'TOOL'\n"
        assert call(session, "print('printed')\n7").output == "printed\n"  # it printed: the value is not shown
        assert call(session, "None").output == ""
        assert call(session, "import random\ndraw = random.random()\ndraw").output == call(session, "draw").output


def test_an_exception_shows_its_last_line():
    with new_session(PYTHON) as session:
        result = call(session, "print('before')\nundefined_name + 1")
        assert result.error
        assert result.output == "before\nNameError: name 'undefined_name' is not defined\n"
        syntax = call(session, "def f(:\n    pass")
        assert syntax.error and syntax.output.endswith("SyntaxError: invalid syntax\n")
        assert 'File "<call>", line 1' in syntax.output
        assert call(session, "import sys\nsys.exit(3)").output == "SystemExit: 3\n"
        # the calls that failed are not replayed
        assert (call(session, "print('fine')").output, call(session, "print('fine')").error) == ("fine\n", False)


def test_a_call_past_its_time_limit_is_killed():
    settings = tool_settings("python", timeout_seconds=1)
    with new_session(settings) as session:
        result = session.call("x = 5\nimport time\ntime.sleep(30)")
        assert (result.output, result.timeout, result.error) == ("Timed out after 1 s", True, False)
        assert 1 <= result.seconds < 5
        # the session goes on, without the call that timed out
        assert call(session, "print('x' in dir())").output == "False\n"


def test_two_sessions_share_nothing():
    with new_session(PYTHON) as first, new_session(PYTHON) as second:
        call(first, "x = 1")
        result = call(second, "print(x)")
        assert (result.output, result.error) == ("NameError: name 'x' is not defined\n", True)


# ---------------------------------------------------------------- a hostile call


def test_a_call_cannot_read_the_jobs_secrets(tmp_path, monkeypatch):
    secret = f"tool-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("SNAKESKILLS_TEST_SECRET", secret)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results.jsonl").write_text(secret)
    home_file = Path.home() / f".snakeskills-tool-test-{secrets.token_hex(8)}"
    home_file.write_text(secret)
    try:
        text = (
            "import os\n"
            "print(dict(os.environ))\n"
            "for pid in [name for name in os.listdir('/proc') if name.isdigit()] + ['1', 'self']:\n"
            "    for name in ('environ', 'cmdline'):\n"
            "        try:\n"
            "            print(open(f'/proc/{pid}/{name}', 'rb').read())\n"
            "        except OSError as error:\n"
            "            print('refused', pid, name)\n"
            f"for path in [{str(tmp_path / 'results.jsonl')!r}, 'results.jsonl', {str(home_file)!r}]:\n"
            "    try:\n"
            "        print(open(path).read())\n"
            "    except OSError as error:\n"
            "        print('refused', path, type(error).__name__)\n"
            "print('searched')"
        )
        result = call(new_session(tool_settings("python", max_output_characters=10**7)), text)
    finally:
        home_file.unlink()
    assert not result.error and result.output.endswith("searched\n"), result.output
    assert secret not in result.output
    assert result.output.count("refused") >= 3  # the three files


def test_a_call_cannot_reach_the_network():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    text = (
        "import socket\n"
        f"for address in [('127.0.0.1', {port}), ('1.1.1.1', 53)]:\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=1).close()\n"
        "        print('reached', address)\n"
        "    except OSError as error:\n"
        "        print('refused', address)\n"
    )
    try:
        result = call(new_session(PYTHON), text)
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
    assert result.output == f"refused ('127.0.0.1', {port})\nrefused ('1.1.1.1', 53)\n"


# ---------------------------------------------------------------- a user's tool


def user_tool(tmp_path: Path, monkeypatch, source: str, **files: str) -> str:
    """A module of its own name in ``tmp_path``, on the path (with ``files`` beside it); its name."""
    name = f"user_tool_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(source)
    for file_name, text in files.items():
        (tmp_path / f"{file_name}.py").write_text(text)
    monkeypatch.syspath_prepend(tmp_path)
    return name


def test_a_user_tool_gets_its_text_verbatim(tmp_path, monkeypatch):
    module = user_tool(
        tmp_path, monkeypatch, "def echo(text):\n    return text\n\ndef size(text):\n    return len(text)\n"
    )
    text = 'say "hi" and \'bye\'\n\\n is no newline; """triple""" {braces} %s é 漢字\r\n\tend\n'
    settings = tool_settings(f"{module}:echo", timeout_seconds=5)
    check_tool(settings)
    result = call(new_session(settings), text)
    assert (result.output, result.error) == (text, False)
    assert call(new_session(tool_settings(f"{module}:size")), text).output == str(len(text))


def test_a_user_tool_that_raises_shows_its_error(tmp_path, monkeypatch):
    module = user_tool(tmp_path, monkeypatch, "def run(text):\n    print('working')\n    raise ValueError(text[:5])\n")
    result = call(new_session(tool_settings(f"{module}:run")), "bad input")
    assert (result.output, result.error) == ("working\nValueError: bad i\n", True)


def test_a_user_tool_that_loops_forever_times_out(tmp_path, monkeypatch):
    module = user_tool(tmp_path, monkeypatch, "def run(text):\n    while True:\n        pass\n")
    result = new_session(tool_settings(f"{module}:run", timeout_seconds=1)).call("go")
    assert (result.output, result.timeout) == ("Timed out after 1 s", True)


def test_a_user_tool_that_cannot_run_in_the_sandbox_stops_the_plan(tmp_path, monkeypatch):
    """It imports a module beside its file, which the sandbox does not copy."""
    module = user_tool(
        tmp_path, monkeypatch, "import helper_beside\n\ndef run(text):\n    return text\n", helper_beside=""
    )
    with pytest.raises(SnakeskillsError, match=r"config key tools.tool: .* not in the tool's sandbox .*helper_beside"):
        check_tool(tool_settings(f"{module}:run"))


def test_a_user_tool_of_several_parameters_takes_a_calls_arguments_as_keywords(tmp_path, monkeypatch):
    """A function of several parameters (offered through a chat template with all of them) runs in the sandbox with
    the call's JSON object as its keyword arguments; text that is not an object is an error the model reads."""
    module = user_tool(
        tmp_path,
        monkeypatch,
        "def convert(amount, unit='km', to='mi'):\n    return f'{amount} {unit} -> {to}'\n\n"
        "def first(*parts):\n    return parts[0]\n\ndef only(text, /):\n    return text\n",
    )
    settings = tool_settings(f"{module}:convert", timeout_seconds=5)
    check_tool(settings)
    session = new_session(settings)
    assert call(session, '{"amount": 5, "to": "m"}').output == "5 km -> m"
    wrong = call(session, "5 km")
    assert wrong.error and wrong.output.startswith("Error: convert takes its arguments as a JSON object (")
    unknown = call(session, '{"amount": 1, "speed": 2}')
    assert unknown.error and "TypeError" in unknown.output and "speed" in unknown.output
    for spec in ("first", "only"):  # *args, or one parameter by position only: the call's text
        assert call(new_session(tool_settings(f"{module}:{spec}")), '{"a": 1}').output == '{"a": 1}'
