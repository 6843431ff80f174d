"""A health alert in Slack you can act on: its buttons (Drain, Run health with DCGM level 2,
Silence 24 h) through the real Bolt app over signed HTTP, against the fake Web API."""
from __future__ import annotations

from support.slack_harness import TOKEN, open_harness

from eaglebot.engine.health_watch import HostReport, Probe
from eaglebot.frontends.chat.grammar import parse
from eaglebot.frontends.slack.client import make_client
from eaglebot.frontends.slack.health_alerts import HEALTH_RUN_ACTION, HEALTH_SILENCE_ACTION, post_health_alert

REASON = "Xid 79 (GPU has fallen off the bus)"


async def test_alert_buttons_run_health_silence_for_operators_and_drain_parses(tmp_path, fake):
    h = await open_harness(tmp_path, fake)
    try:
        store = h.services.store
        await store.call(lambda s: s.health_transition("local", 0, "quarantined", REASON, "health-watch"))
        client = make_client(h.services.settings, TOKEN, backoff_s=0.01)
        report = HostReport("local", Probe("local", "ok"), [(0, "healthy", "quarantined", REASON)])
        await post_health_alert(client, store, "CHEALTH", report)
        [post] = fake.ok_calls_to("chat.postMessage")
        buttons = {e["action_id"]: e["value"] for b in post.blocks() if b["type"] == "actions" for e in b["elements"]}
        assert buttons[f"{HEALTH_RUN_ACTION}_health"] == "health local dcgm_level=2"
        assert buttons[HEALTH_SILENCE_ACTION] == "local 0"
        drain = parse(buttons[f"{HEALTH_RUN_ACTION}_drain"])
        assert (drain.playbook, drain.hosts, dict(drain.inputs)) == ("drain", ("local",), {"reason": REASON})
        # Run health: exactly `/eagle health local dcgm_level=2`, by an operator
        assert await h.click(f"{HEALTH_RUN_ACTION}_health", buttons[f"{HEALTH_RUN_ACTION}_health"], user="UALICE") == 200
        run = await h.wait_run(await h.last_run_id())
        assert run["playbook"] == "health" and run["inputs"]["dcgm_level"] == 2 and run["actor"] == "UALICE"
        # Silence: a viewer may not; an operator may, recorded, and the message says who
        assert await h.click(HEALTH_SILENCE_ACTION, "local 0", user="UEVE") == 200
        await fake.wait_for(lambda: [c for c in fake.calls if "only operators can silence" in c.all_text()])
        assert (await store.call(lambda s: s.health_states("local")))[0]["silenced_by"] is None
        assert await h.click(HEALTH_SILENCE_ACTION, "local 0", user="UALICE") == 200
        upd = await fake.wait_for(lambda: [c for c in fake.ok_calls_to("chat.update") if "silenced by" in c.all_text()])
        assert "<@UALICE>" in upd[0].all_text()
        # (the click's own answer follows the update: counted before the next turn is posted)
        await fake.wait_for(lambda: [c for c in fake.calls_to("response_url") if "silenced for 24 h" in c.all_text()])
        row = (await store.call(lambda s: s.health_states("local")))[0]
        assert row["silenced_by"] == "UALICE" and row["silenced_until"]
        # silenced: a new turn of the incident is not posted; its resolution is
        n = len(fake.calls)
        await post_health_alert(client, store, "CHEALTH",
                                HostReport("local", Probe("local", "ok"), [(0, "quarantined", "suspect", "again")]))
        assert len(fake.calls) == n
        await store.call(lambda s: s.health_set_alert("local", 0, "CHEALTH", post.answer["ts"]))
        await store.call(lambda s: s.health_transition("local", 0, "healthy", "3 clean probes", "health-watch"))
        await post_health_alert(client, store, "CHEALTH",
                                HostReport("local", Probe("local", "ok"), [(0, "quarantined", "healthy", "3 clean probes")]))
        # the alert's own message is edited (the health run's thread message may update after it)
        alert_updates = [c for c in fake.ok_calls_to("chat.update") if c.args.get("ts") == post.answer["ts"]]
        assert alert_updates and "resolved" in alert_updates[-1].args["text"]
        assert (await store.call(lambda s: s.health_states("local")))[0]["silenced_until"] is None      # the silence ends with it
    finally:
        await h.close()
