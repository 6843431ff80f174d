"""A schedule's fire of `playbook: tune` (engine/schedules.py): a tuning run, as `eagle tune` runs
it, that never applies; a new best beyond the noise is posted as a proposal with an Apply button
(Slack hooks that have `post_tune`) or a line that says how to apply it."""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, TYPE_CHECKING

from eaglebot.config import ScheduleConfig
from eaglebot.engine.runner import Engine
from eaglebot.errors import EagleError

if TYPE_CHECKING:
    from eaglebot.store.door import Door
    from eaglebot.store.protocol_service import SchedulesFace

log = logging.getLogger("eaglebot.scheduler")


def request(cfg: ScheduleConfig) -> Any:
    """The schedule's inputs as a tuning request (bad values: UsageError)."""
    from eaglebot.tuning import tune

    i = dict(cfg.inputs)

    def ints(key: str, default: str, lo: int = 1, hi: int = 4096) -> list[int]:
        v = i.get(key, default)
        return tune.parse_ints(",".join(map(str, v)) if isinstance(v, list) else str(v), key, lo, hi)

    req = tune.TuneRequest(str(i["playbook"]), cfg.hosts[0], ints("batch_sizes", "1,8,32"),
                           fixed={str(k): v for k, v in (i.get("inputs") or {}).items()})
    if "budget" in i:
        req.budget_s = tune.parse_duration(str(i["budget"]))
    if "repeats" in i:
        req.repeats = ints("repeats", "3", 1, 20)[0]
    if "steps" in i:
        req.steps = ints("steps", "", 1, 16)
    if "topk" in i:
        req.topk = ints("topk", "", 1, 64)
    if "draft_tokens" in i:
        req.draft_tokens = ints("draft_tokens", "", 2, 256)
    if "max_launches" in i:
        req.max_launches = ints("max_launches", "", 1, 1000)[0]
    if "flap_trace" in i:
        v = i["flap_trace"]
        req.flap_trace = [str(p) for p in v] if isinstance(v, list) else [p for p in str(v).split(",") if p]
    if "flap_settle" in i:
        req.flap_settle_s = tune.parse_seconds(str(i["flap_settle"]), "flap_settle")
    return req


async def fire(engine: Engine, store: Door[SchedulesFace], hooks: Any, cfg: ScheduleConfig, fire_id: int,
               channel: str | None) -> int | None:
    """`hooks`: the scheduler's (observer, post, upload, and Slack's post_tune)."""
    from eaglebot.frontends.tuning.tune_plot import render_tune
    from eaglebot.frontends.tuning.tune_text import tune_text
    from eaglebot.tuning import tune

    try:
        req = request(cfg)
        r = await tune.run_tuning(engine, req, actor=f"schedule:{cfg.name}", origin="schedule",
                                  observer=hooks.observer(cfg), approver=None, assume_yes=cfg.approve,
                                  channel=channel, schedule=cfg.name)
    except EagleError as e:
        await store.call(lambda s: s.update_fire(fire_id, "error"))
        await hooks.post(channel, f":x: scheduled tune {cfg.name} did not start: {e}")
        return None
    await store.call(lambda s: s.update_fire(fire_id, r["status"], r["run_id"]))
    text = f"scheduled tune {cfg.name}: " + tune_text(r)
    p = r.get("proposal") or {}
    offer = p.get("apply") if p.get("beats_current") else None
    if offer:
        text += (f"\nproposal: {p['gain_pct']:+.1f}% over the config now deployed (noise {p['noise_pct']:.1f}%); "
                 f"nothing was changed: `/eagle {offer}` deploys it after an approval")
    post_tune = getattr(hooks, "post_tune", None)
    ts = await post_tune(channel, text, r["run_id"], offer) if post_tune else await hooks.post(channel, text)
    if any(e.get("tok_s") is not None for e in r["batch_sizes"].values()):
        with tempfile.TemporaryDirectory(prefix="eagle-tune-") as d:
            try:
                png = render_tune(r, Path(d) / f"tune-{r['run_id']}.png")
                await hooks.upload(channel, ts, png, f"tuning run #{r['run_id']}: Pareto plot")
            except Exception:
                log.exception("schedule %s: the tuning plot failed", cfg.name)
    return int(r["run_id"])
