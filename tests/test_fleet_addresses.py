"""A real fleet's addresses (issue 34 item 3): an ssh host's `address` defaults to its name (as
Ansible's inventory_hostname), and in a range it may be a template of the member: `{{ name }}`,
`{{ n }}` (the number: 7 for gpu-07), `{{ n_text }}` (as written: "07"), `{{ index }}` (0-based
place in the range). DESIGN's own `"gpu-[001:064]": {vars: {...}}` is accepted."""
from __future__ import annotations

import json

import pytest
from support.helpers import eagle, write_yaml
from support.inproc import eagle_here

from eaglebot.config import Settings, load_settings
from eaglebot.errors import UsageError


def test_designs_range_form_with_host_defaults_gives_each_member_its_name_as_address():
    s = Settings.model_validate({"host_defaults": {"user": "ops", "key": "~/.ssh/id_ed25519"},
                                 "hosts": {"gpu-[001:064]": {"vars": {"python": "/opt/sglang/bin/python"}},
                                           "bastion": {}}})
    assert len([h for h in s.hosts if h.startswith("gpu-")]) == 64
    g7 = s.hosts["gpu-007"]
    assert (g7.address, g7.user, g7.vars["python"]) == ("gpu-007", "ops", "/opt/sglang/bin/python")
    assert s.hosts["bastion"].address == "bastion"
    assert s.hosts["local"].transport == "local" and s.hosts["local"].address is None


def test_address_templates_of_the_name_and_the_range_member():
    s = Settings.model_validate({"hosts": {
        "gpu-[07:09]": {"address": "10.0.1.{{ n }}"},
        "node-[001:002]": {"address": "{{ name }}.cluster"},
        "rack-[a:b]-[1:2]": {"address": "10.{{index}}.0.{{ n }}-{{ n_text }}"},
        "pad-[08:09]": {"address": "host{{ n_text }}"},
        "single": {"address": "{{ name }}.example.org"},
        "gpu-08": {"address": "10.9.9.9"},   # a member named alone keeps its own address
    }})
    assert [s.hosts[h].address for h in ("gpu-07", "gpu-08", "gpu-09")] == ["10.0.1.7", "10.9.9.9", "10.0.1.9"]
    assert s.hosts["node-002"].address == "node-002.cluster"
    assert [s.hosts[h].address for h in ("rack-a-1", "rack-a-2", "rack-b-1", "rack-b-2")] == \
        ["10.0.0.1-1", "10.1.0.2-2", "10.2.0.1-1", "10.3.0.2-2"]
    assert s.hosts["pad-08"].address == "host08" and s.hosts["single"].address == "single.example.org"


@pytest.mark.parametrize("hosts,line,message", [   # (hosts: line 1, the key line 2, its address line 3)
    ({"gpu-[1:2]": {"address": "{{ nme }}"}}, 3,
     "hosts: gpu-[1:2]: address '{{ nme }}': `nme` is not defined (did you mean 'name'?); an address may use "
     "{{ name }}, and in a range {{ n }}, {{ n_text }} and {{ index }}"),
    ({"solo": {"address": "10.0.0.{{ n }}"}}, 3,
     "hosts: solo: address '10.0.0.{{ n }}': `n` is not defined (solo is not in a range)"),
    ({"gpu-[1:2]": {"address": "{{ n + 100 }}"}}, 3, "each alone in its {{ }}"),
    ({"gpu-[1:2]": {"address": "{{ name }} ; rm -rf /"}}, 3,
     "address '{{ name }} ; rm -rf /' gives 'gpu-1 ; rm -rf /' for gpu-1: not a host name or IP address"),
])
def test_a_bad_address_template_is_one_sentence_at_its_line(tmp_path, hosts, line, message):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"hosts": hosts})
    with pytest.raises(UsageError) as e:
        load_settings(cfg)
    assert str(e.value).startswith(f"{cfg}:{line}: ") and message in str(e.value), str(e.value)


def test_eagle_hosts_shows_the_resolved_address(tmp_path):
    cfg = write_yaml(tmp_path / "eagle.yaml", {"host_defaults": {"user": "ops"},
                                               "hosts": {"gpu-[01:02]": {"address": "10.0.1.{{ n }}"},
                                                         "box": {}}})
    res = eagle_here("hosts", "--json", config=cfg)
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r["address"] for r in json.loads(res.stdout)}
    assert rows == {"gpu-01": "ops@10.0.1.1:22", "gpu-02": "ops@10.0.1.2:22", "box": "ops@box:22",
                    "local": "this machine"}
    text = eagle_here("hosts", config=cfg)
    assert "ops@10.0.1.2:22" in text.stdout and "ops@box:22" in text.stdout


def test_a_templated_range_member_runs_over_the_real_sshd(tmp_path, sshd):
    """`loop-[1:1]` with `address: "127.0.0.{{ n }}"` is 127.0.0.1: the playbook runs there."""
    own = sshd.host_config()
    del own["address"]
    cfg = write_yaml(tmp_path / "eagle.yaml", {"hosts": {"loop-[1:1]": {**own, "address": "127.0.0.{{ n }}"}}})
    res = eagle("run", "hello", "-H", "loop-1", "--json", config=cfg)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "succeeded" and all(s["host"] == "loop-1" for s in doc["steps"])
