"""The inventory at fleet size: host ranges, host_defaults, groups of groups, `all`, and -H
patterns (Ansible's limit grammar), as docs/configuration.md documents them."""
from __future__ import annotations

import json

import pytest
from support.helpers import eagle, write_yaml

from eaglebot.config import Settings, load_settings
from eaglebot.errors import UsageError
from eaglebot.inventory import expand

FLEET = {
    "host_defaults": {"user": "ops", "port": 2222, "key": "~/.ssh/fleet", "jump": "bastion",
                      "vars": {"python": "/opt/sglang/bin/python", "port": 30000}},
    "hosts": {
        "bastion": {"address": "bastion.example", "jump": None},
        "gpu-[001:004]": {"address": "10.0.0.1", "vars": {"model": "/models/a"}},
        "gpu-003": {"address": "10.0.0.3", "vars": {"port": 30001}},
        "h200-[a:b]-[1:2]": {"address": "10.0.1.1", "user": "root"},
        "local": {"transport": "local"},
    },
    "groups": {"h200": ["h200-a-[1:2]", "h200-b-1"], "gpus": ["h200", "gpu-[001:002]"], "everything": ["gpus", "gpu-004"]},
}


def test_ranges_expand_in_order_and_keep_the_width_of_the_first_bound():
    assert expand("gpu-[01:03]") == ["gpu-01", "gpu-02", "gpu-03"]
    assert expand("gpu-[8:11]") == ["gpu-8", "gpu-9", "gpu-10", "gpu-11"]
    assert expand("h200-[a:b]-[1:2]") == ["h200-a-1", "h200-a-2", "h200-b-1", "h200-b-2"]
    assert expand("plain") == ["plain"]
    with pytest.raises(ValueError, match="counts down"):
        expand("gpu-[9:1]")
    with pytest.raises(ValueError, match="at most 100000"):
        expand("gpu-[1:999999]")


def test_hosts_inherit_host_defaults_and_override_them():
    s = Settings.model_validate(FLEET)
    assert list(s.hosts) == ["bastion", "gpu-001", "gpu-002", "gpu-003", "gpu-004",
                             "h200-a-1", "h200-a-2", "h200-b-1", "h200-b-2", "local"]
    g1, g3, h = s.hosts["gpu-001"], s.hosts["gpu-003"], s.hosts["h200-b-2"]
    assert (g1.user, g1.port, g1.key, g1.jump, g1.address) == ("ops", 2222, "~/.ssh/fleet", "bastion", "10.0.0.1")
    assert g1.vars == {"python": "/opt/sglang/bin/python", "port": 30000, "model": "/models/a"}
    # a host named on its own refines what its range gave it; vars merge key by key
    assert g3.address == "10.0.0.3" and g3.vars == {"python": "/opt/sglang/bin/python", "port": 30001,
                                                      "model": "/models/a"}
    assert (h.user, h.port) == ("root", 2222)
    assert s.hosts["bastion"].jump is None  # its own `jump: null` wins over the default
    assert s.hosts["local"].transport == "local" and s.hosts["local"].vars["port"] == 30000


def test_groups_of_groups_all_and_patterns():
    s = Settings.model_validate(FLEET)
    assert s.groups["everything"] == ["h200-a-1", "h200-a-2", "h200-b-1", "gpu-001", "gpu-002", "gpu-004"]
    assert s.resolve_hosts(["all"]) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004",
                                        "h200-a-1", "h200-a-2", "h200-b-1", "h200-b-2"]  # no bastion, no local
    assert s.resolve_hosts(["gpu-00*"]) == ["gpu-001", "gpu-002", "gpu-003", "gpu-004"]
    assert s.resolve_hosts(["gpus:!gpu-001"]) == ["h200-a-1", "h200-a-2", "h200-b-1", "gpu-002"]
    assert s.resolve_hosts(["all:&h200:!h200-a-2"]) == ["h200-a-1", "h200-b-1"]
    assert s.resolve_hosts(["gpu-[002:003]", "gpu-001,gpu-002"]) == ["gpu-002", "gpu-003", "gpu-001"]
    assert s.resolve_hosts(["local"]) == ["local"]
    with pytest.raises(UsageError, match="unknown host 'gpu-9'"):
        s.resolve_hosts(["gpu-9"])
    with pytest.raises(UsageError, match="unknown host 'gpu-005' in gpu-\\[004:006\\] \\(2 of 3 not configured\\)"):
        s.resolve_hosts(["gpu-[004:006]"])
    with pytest.raises(UsageError, match="no host or group matches 'a100-\\*'"):
        s.resolve_hosts(["a100-*"])
    with pytest.raises(UsageError, match="no host left"):
        s.resolve_hosts(["h200:!h200"])
    assert Settings().resolve_hosts(["all"]) == ["local"]
    # a config's own group `all` (written before it was built in) keeps its meaning
    own = Settings.model_validate({**FLEET, "groups": {"all": ["gpu-001"]}})
    assert own.resolve_hosts(["all"]) == ["gpu-001"]


@pytest.mark.parametrize("groups,line,message", [
    ({"g": ["gpu-001"], "h": ["g", "nope"]}, 8, "group 'h': unknown host 'nope'"),
    ({"a": ["b"], "b": ["a"]}, 6, "groups form a loop (a -> b -> a)"),
    ({"g": ["gpu-[002:003]"]}, 6, "group 'g': unknown host 'gpu-003'"),
])
def test_unknown_names_in_a_group_are_an_error_at_their_line(tmp_path, groups, line, message):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"hosts": {"gpu-[001:002]": {"address": "x"}}, "host_defaults": {},
                                               "groups": groups})
    # hosts (3 lines), host_defaults (1), groups: (1), then each group and its members, a line each
    with pytest.raises(UsageError) as e:
        load_settings(cfg)
    assert str(e.value).startswith(f"{cfg}:{line}: ") and message in str(e.value)


def test_host_defaults_take_only_settings_hosts_share(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"host_defaults": {"user": "ops", "address": "10.0.0.1"}})
    with pytest.raises(UsageError, match=r"eagle.yaml:3: host_defaults: address: not a setting hosts share"):
        load_settings(cfg)


def test_eagle_hosts_shows_the_expanded_inventory(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", FLEET)
    res = eagle("hosts", "--json", config=cfg)
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)}
    assert rows["gpu-003"]["address"] == "ops@10.0.0.3:2222" and rows["gpu-003"]["jump"] == "bastion"
    assert rows["h200-a-1"]["groups"] == ["h200", "gpus", "everything"]
