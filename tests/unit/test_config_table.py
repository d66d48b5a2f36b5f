"""Settings declared once (gateway/config/): flags, variables, the options dataclasses below
and docs/options.md all come from the one declaration."""

import dataclasses
from pathlib import Path

import pytest

from gateway.config import RENAMED, GatewayConfig, parse_config
from gateway.config.table import env_of, flag_of, markdown, settings
from gateway.conversation.duplex import HearingOptions
from gateway.conversation.options import SessionOptions

REPO = Path(__file__).resolve().parents[2]


def test_defaults_are_the_dataclass_defaults():
    assert parse_config([], {}) == GatewayConfig()


def test_a_variable_holds_the_value_and_a_flag_wins_over_it():
    env = {"GATEWAY_WORKERS": "3", "GATEWAY_UDP_MUX": "0", "GATEWAY_LIVE_LEAD_MS": "50"}
    config = parse_config([], env)
    assert (config.workers, config.udp_mux, config.live_lead_ms) == (3, False, 50.0)
    config = parse_config(["--workers", "2", "--udp-mux", "--live-lead-ms", "70"], env)
    assert (config.workers, config.udp_mux, config.live_lead_ms) == (2, True, 70.0)


def test_repeatable_flags_and_their_joined_variables():
    assert parse_config(["--voice", "a", "--voice", "b"], {}).voices == ("a", "b")
    assert parse_config([], {"GATEWAY_VOICES": "a; b"}).voices == ("a", "b")
    assert parse_config([], {"GATEWAY_AUTH_TOKEN": "x,y"}).auth_tokens == ("x", "y")


def test_every_boolean_has_a_pair_of_flags():
    for field in settings(GatewayConfig):
        if isinstance(field.default, bool):
            flag = flag_of(field)
            on = parse_config([flag], {})
            off = parse_config(["--no-" + flag[2:]], {})
            assert getattr(on, field.name) is True and getattr(off, field.name) is False


def test_a_bad_variable_names_itself(capsys):
    with pytest.raises(SystemExit):
        parse_config([], {"GATEWAY_PORT": "eighty"})
    assert "GATEWAY_PORT" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config([], {"GATEWAY_LOG_LEVEL": "LOUD"})
    assert "GATEWAY_LOG_LEVEL" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(RENAMED))
def test_a_renamed_flag_or_variable_fails_with_its_successor(name, capsys):
    argv, env = ([name], {}) if name.startswith("--") else ([], {name: "1"})
    with pytest.raises(SystemExit):
        parse_config(argv, env)
    assert RENAMED[name] in capsys.readouterr().err


def test_negative_live_pacing_is_refused(capsys):
    with pytest.raises(SystemExit):
        parse_config(["--live-lead-ms", "-1"], {})


def test_flags_and_variables_are_unique():
    fields = settings(GatewayConfig)
    assert len({flag_of(f) for f in fields}) == len(fields)
    assert len({env_of(f) for f in fields}) == len(fields)


@pytest.mark.parametrize("cls", [SessionOptions, HearingOptions])
def test_lower_options_take_every_setting_of_their_name(cls):
    """No setting copied by hand: every field of the options dataclass that has a setting of
    the same name gets its value (changed from the default here, so a missed one shows)."""
    names = {f.name for f in settings(GatewayConfig)}
    shared = [f for f in dataclasses.fields(cls) if f.name in names]
    assert shared
    changes = {}
    choices = {f.name for f in settings(GatewayConfig) if f.metadata["opt"].choices is not None}
    for f in shared:
        if f.name in choices:
            continue  # a value outside its choices would be refused
        default = getattr(GatewayConfig(), f.name)
        if isinstance(default, bool):
            changes[f.name] = not default
        elif isinstance(default, int) and f.name.startswith("red_"):
            changes[f.name] = 1 if default != 1 else 0
        elif isinstance(default, (int, float)):
            changes[f.name] = default + 1
        elif isinstance(default, str):
            changes[f.name] = default + "-x"
    config = dataclasses.replace(GatewayConfig(), **changes)
    made = config.session_options() if cls is SessionOptions else config.hearing_options()
    for name, value in changes.items():
        assert getattr(made, name) == value, name


def test_the_option_list_in_docs_is_current():
    assert (REPO / "docs" / "options.md").read_text().strip() == markdown(GatewayConfig).strip()
