"""A playbook's allowlist holds for every word that runs a playbook (issue 46 item 3): with
`playbooks: {relaunch: [UALICE]}`, UBOB (an operator) is refused `relaunch` however he asks
for it: `/eagle relaunch`, `rerun`, `sweep` (and `sweep resume`), `tune` (and `tune apply`, and a
scheduled tuning's Apply button), `bisect`. Signed HTTP through the Bolt app; the words come
from the word table, so a new word fails here until it says how it runs a playbook."""
from __future__ import annotations

import asyncio

from slack_harness import PLAYBOOKS

from eaglebot.frontends.chat.words import RUN, WORDS
from eaglebot.frontends.slack.tuning import APPLY_BEST_ACTION

RELAUNCH = {"name": "relaunch", "description": "stand-in relaunch",
            "inputs": {"spec_steps": {"type": "int", "default": 3}},
            "steps": [{"skill": "shell", "with": {"command": "echo relaunch {{ spec_steps }}"}}]}

# How each word of the table asks for a run of `relaunch` (None: the word runs no playbook).
SAMPLES: dict[str, str | None] = {
    "run": "relaunch local",
    "rerun": "rerun {good}",
    "sweep": "sweep relaunch local spec_steps=3,5",
    "tune": "tune relaunch local batch_sizes=1",
    "bisect": "bisect {good} {bad} local",
    **{w: None for w in ("help", "playbooks", "hosts", "history", "show", "status", "fleet", "cancel", "logs",
                         "schedule", "baseline", "trend", "reload", "diff", "ack")},
}
# Other ways into the same words (their arguments pick another path).
EXTRA = ["sweep resume {sweep}", "tune apply {tune}"]


def test_every_word_of_the_table_says_whether_it_runs_a_playbook():
    missing = [w.name for w in (RUN, *WORDS) if w.name not in SAMPLES]
    assert not missing, f"add to SAMPLES how /eagle {missing[0]} runs a playbook (or None if it runs none)"


async def _refused(h, n_before: int) -> str:
    """The reason of the refusal the last command got, once audited."""
    for _ in range(1500):
        events = await h.query("select reason from events where kind = 'access_denied' order by id desc")
        if len(events) > n_before:
            return events[0]["reason"]
        await asyncio.sleep(0.02)
    raise AssertionError("no access_denied event")


async def test_a_user_off_the_allowlist_is_refused_relaunch_by_every_word(harness, fake):
    h = await harness(access={"operators": ["UALICE", "UBOB"], "approvers": ["UBOSS"], "viewers": ["*"],
                              "playbooks": {"relaunch": ["UALICE"]}},
                      playbooks={**PLAYBOOKS, "relaunch": RELAUNCH})
    ids = []
    for _ in range(2):   # two runs of relaunch by someone on the list: what rerun and bisect act on
        await h.command("relaunch local", user="UALICE")
        n = len(ids) + 1
        for _ in range(1500):
            rows = await h.query("select id from runs order by id")
            if len(rows) >= n:
                break
            await asyncio.sleep(0.02)
        ids.append(rows[-1]["id"])
        assert (await h.wait_run(ids[-1]))["status"] == "succeeded"
    store = h.services.store
    sweep = await store.call(lambda s: s.create_sweep(kind="sweep", playbook="relaunch", host="local", spec={"axes": {}},
                                     actor="UALICE", origin="slack", points=[]))
    tune_id = await store.call(lambda s: s.create_sweep(kind="tune", playbook="relaunch", host="local", spec={"fixed": {}},
                                       actor="UALICE", origin="slack", points=[]))
    tune_run = await store.call(lambda s: s.start_run([], {
        "playbook": "tune", "hosts": ["local"], "inputs": {"tune_id": tune_id}, "variables": {}, "actor": "UALICE",
        "origin": "slack"}))
    await store.call(lambda s: s.finish_run(tune_run, "succeeded", exit_code=0))
    names = {w.name for w in (RUN, *WORDS)}
    assert set(SAMPLES) == names, "SAMPLES names a word the table does not have"
    texts = [t for t in SAMPLES.values() if t is not None] + EXTRA
    fill = {"good": ids[0], "bad": ids[1], "sweep": sweep, "tune": tune_run}
    for text in texts:
        before = len(await h.query("select id from events where kind = 'access_denied'"))
        status, _ = await h.command(text.format(**fill), user="UBOB")
        assert status == 200
        why = await _refused(h, before)
        assert "access.playbooks.relaunch" in why, (text, why)
    # the Apply button of a (scheduled) tuning run is typing `/eagle tune apply RUN`
    before = len(await h.query("select id from events where kind = 'access_denied'"))
    assert await h.click(APPLY_BEST_ACTION, f"tune apply {tune_run}", user="UBOB") == 200
    assert "access.playbooks.relaunch" in await _refused(h, before)
    # nothing ran, nothing was recorded for UBOB but the refusals
    assert await h.query("select id from runs where actor = 'UBOB'") == []
    assert await h.query("select id from sweeps where actor = 'UBOB'") == []
    denied = await h.query("select actor, reason from events where kind = 'access_denied'")
    assert len(denied) == len(texts) + 1 and {d["actor"] for d in denied} == {"UBOB"}
    # and the one on the list is not refused by the same check
    await h.command(f"rerun {ids[0]}", user="UALICE")
    for _ in range(1500):
        rows = await h.query("select id from runs where rerun_of = $1", [ids[0]])
        if rows:
            break
        await asyncio.sleep(0.02)
    [rerun] = rows
    assert (await h.wait_run(rerun["id"]))["status"] == "succeeded"
