"""Each setting says once, beside its default, when it may change and whom it belongs to
(`when` and `scope` in config/settings.py); the lists the backends, the trainer, the run's
control and the class use are derived from that (config/loading.fields_where), never kept by
hand beside it."""

from __future__ import annotations

import dataclasses

from sapo_edge.backends.base import LOAD_TIME_SETTINGS
from sapo_edge.classroom.settings import CLASS_FIELDS, LOCAL_FIELDS, OVERRIDABLE
from sapo_edge.config.loading import fields_where
from sapo_edge.config.settings import Config
from sapo_edge.rl.node_settings import RESTART_SETTINGS
from sapo_edge.run.control import NETWORK_SETTINGS

WHEN = {None, "load", "restart", "network"}
SCOPE = {None, "local", "both", "never"}


def test_every_setting_names_a_known_when_and_scope() -> None:
    for f in dataclasses.fields(Config):
        assert f.metadata.get("when") in WHEN, (f.name, f.metadata.get("when"))
        assert f.metadata.get("scope") in SCOPE, (f.name, f.metadata.get("scope"))


def test_the_lists_are_the_settings_own_words() -> None:
    assert LOAD_TIME_SETTINGS == fields_where(Config, "when", "load")
    assert LOAD_TIME_SETTINGS < RESTART_SETTINGS == fields_where(Config, "when", "load", "restart")
    assert NETWORK_SETTINGS == fields_where(Config, "when", "network")
    assert OVERRIDABLE <= LOCAL_FIELDS and OVERRIDABLE <= CLASS_FIELDS
    # a few that must never move: the class's recipe is sent, a laptop's hardware and the
    # room's secret are not
    assert {"learning_rate", "group_size", "domains", "lora_r"} <= CLASS_FIELDS
    assert {"threads", "dtype", "out_dir"} <= LOCAL_FIELDS - CLASS_FIELDS
    assert not {"secret", "secret_file", "room", "relay", "hint"} & CLASS_FIELDS
    assert {"model", "lora_r"} <= LOAD_TIME_SETTINGS and "learning_rate" not in RESTART_SETTINGS
