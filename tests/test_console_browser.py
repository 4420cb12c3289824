"""The web console in a real browser (headless Chromium from Debian, driven by
Playwright) against a running stack: a real nats-server, the sequencer and
the tail. Events published during a test appear live; pause/resume and a
restart of the tail lose nothing; the session view shows the tree, the open
attempts and pauses of a known workload; a tampered read model shows the
verification failure; the cost view plots the ledger's costs; everything is
reachable by keyboard and named for assistive technology. Screenshots of the
main views go to build/screenshots/."""

from __future__ import annotations

import re
import sqlite3

import msgspec
import nats
import pytest
from browser_support import screenshot
from playwright.async_api import Page, expect
from polling import eventually
from sequencer_process import SequencerProcess
from tail_support import fill, new_lane, wait_applied

from laneledger.runtime.access import AccessPolicy
from laneledger.sdk.client import LedgerClient, make_event
from laneledger.services.tail.service import TailService, TailSettings

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

T0 = "2026-11-30T10:00:00.000Z"


def at(seconds: float) -> str:
    """A timestamp ``seconds`` after T0 (to give attempts known durations)."""
    whole, frac = divmod(round(seconds * 1000), 1000)
    minutes, secs = divmod(whole, 60)
    return f"2026-11-30T10:{minutes:02d}:{secs:02d}.{frac:03d}Z"


async def tail_positions(page: Page) -> list[int]:
    return [
        int(p)
        for p in await page.locator("#tail-rows tr").evaluate_all("rows => rows.map(r => r.dataset.position)")
    ]


async def start_live_tail(page: Page, **filters: str) -> None:
    form = page.locator("#tail-form")
    for label, value in filters.items():
        await form.get_by_label(label).fill(value)
    await page.get_by_role("button", name="Start tail").click()
    await expect(page.locator("#tail-status")).to_contain_text("Live")


# -- live tail ------------------------------------------------------------------------------


async def test_live_tail_shows_new_events_and_pause_resume_loses_nothing(client, actor, start_tail, browser):
    tail = await start_tail()
    lane = await new_lane(client, actor, "s1")
    other = await new_lane(client, actor, "s2")
    before = await fill(client, lane, actor, 5)
    await wait_applied(tail.service, before[-1])
    page = await browser.page(tail.url + "/#/tail")
    await expect(page.get_by_role("heading", name="Live tail")).to_be_visible()
    # It starts by itself, with the latest events, unfiltered.
    await expect(page.locator("#tail-status")).to_contain_text("Live: 5 events received")
    await start_live_tail(page, Session="s1")
    await expect(page.locator("#tail-rows tr")).to_have_count(5)  # the backfill

    # Published now, while the page is open: they appear without a reload,
    # and the other session's do not.
    live = await fill(client, lane, actor, 7, per_append=3)
    await fill(client, other, actor, 4)
    await expect(page.locator("#tail-rows tr")).to_have_count(12)
    assert await tail_positions(page) == (before + live)[::-1]  # newest first
    await expect(page.locator("#tail-rows tr").first).to_contain_text("stream.text_delta")
    await screenshot(page, "live-tail")

    # Pause: nothing more is shown; resume: exactly what was published
    # meanwhile, no gap and no duplicate.
    pause = page.get_by_role("button", name="Pause")
    await pause.click()
    resume = page.get_by_role("button", name="Resume")
    await expect(resume).to_have_attribute("aria-pressed", "true")
    await expect(page.locator("#tail-status")).to_contain_text(f"Paused at position {live[-1]}")
    while_paused = await fill(client, lane, actor, 30, per_append=10)
    await wait_applied(tail.service, while_paused[-1])
    await page.wait_for_timeout(500)
    assert len(await tail_positions(page)) == 12
    await resume.click()
    await expect(page.locator("#tail-rows tr")).to_have_count(42)
    after = await fill(client, lane, actor, 3)
    await expect(page.locator("#tail-rows tr")).to_have_count(45)
    assert await tail_positions(page) == (before + live + while_paused + after)[::-1]
    await expect(page.locator("#tail-status")).to_contain_text("45 events received")

    # The event type filter is a prefix; a bad position is refused in the page.
    await page.get_by_label("Event type prefix").fill("run.")
    await page.get_by_role("button", name="Start tail").click()
    await expect(page.locator("#tail-status")).to_contain_text("Live: 0 events")
    await page.get_by_label("After position").fill("x1")
    await page.get_by_role("button", name="Start tail").click()
    await expect(page.locator("#tail-status")).to_contain_text("must be a whole number")


async def test_live_tail_reconnects_after_the_tail_restarts(nats_server, client, actor, tmp_path, browser):
    """The tail process goes away and comes back on the same address: the open
    page resumes from its last position by itself."""

    async def run_tail(port: int) -> tuple[TailService, int, object]:
        nc = await nats.connect(nats_server.url, reconnect_time_wait=0.1)
        service = TailService(nc, TailSettings(data_dir=tmp_path / "tail", watch_interval_s=0.2))
        return service, await service.start("127.0.0.1", port), nc

    async def stop(service, nc) -> None:
        await service.stop()
        await nc.close()

    service, port, nc = await run_tail(0)
    try:
        lane = await new_lane(client, actor, "s1")
        first = await fill(client, lane, actor, 4)
        await wait_applied(service, first[-1])
        page = await browser.page(f"http://127.0.0.1:{port}/#/tail?session_id=s1")
        await expect(page.locator("#tail-rows tr")).to_have_count(4)  # the link started it
        await stop(service, nc)
        await expect(page.locator("#tail-status")).to_contain_text(re.compile("connect", re.I))
        gone = await fill(client, lane, actor, 6)  # committed while no tail runs
        service, _, nc = await run_tail(port)
        await expect(page.locator("#tail-rows tr")).to_have_count(10)
        more = await fill(client, lane, actor, 2)
        await expect(page.locator("#tail-rows tr")).to_have_count(12)
        assert await tail_positions(page) == (first + gone + more)[::-1]
        await expect(page.locator("#tail-status")).to_contain_text("Live")
    finally:
        await stop(service, nc)


# -- the session view ------------------------------------------------------------------------


async def workload(client, actor) -> dict:
    """Session s1 of tenant acme: run r1 with a main agent, two sub-agents
    (one spawning a sub-agent of its own) and a branch; run r2 with a main
    lane. Main's turn has a model call (completed, cost), a write tool call
    that was requested and never ended, and a read that failed and then
    succeeded; one human-in-the-loop pause was answered, one is pending."""
    main = await new_lane(client, actor, "s1", "r1", "main")
    sub1 = await new_lane(client, actor, "s1", "r1", "researcher", kind="subagent", parent_lane_id=main.id)
    sub1a = await new_lane(client, actor, "s1", "r1", "fetcher", kind="subagent", parent_lane_id=sub1.id)
    sub2 = await new_lane(client, actor, "s1", "r1", "reviewer", kind="subagent", parent_lane_id=main.id)
    r2 = await new_lane(client, actor, "s1", "r2", "main")
    turn = await client.create_turn(main.id, 1)
    model = await client.create_action(
        main.id, turn.id, "model_call", "claude-sonnet", effect="none", idempotency="not_applicable"
    )
    edit = await client.create_action(
        main.id, turn.id, "tool_call", "Edit", effect="write", idempotency="none"
    )
    read = await client.create_action(
        main.id, turn.id, "tool_call", "Read", effect="read", idempotency="inherent"
    )
    a_model = await client.create_attempt(main.id, model.id, 1)
    a_edit = await client.create_attempt(main.id, edit.id, 1)
    a_read1 = await client.create_attempt(main.id, read.id, 1)
    a_read2 = await client.create_attempt(main.id, read.id, 2)

    def e(lane, event_type, subject, when, cause=None, **payload):
        return make_event(
            lane.id,
            event_type,
            actor_id=actor.id,
            subject_id=subject,
            payload=payload,
            occurred_at=at(when),
            causation_id=cause,
        )

    cost = {"provider": "anthropic", "currency": "USD"}
    spawn = e(main, "attempt.requested", a_model.id, 0.1, attempt_no=1)
    receipt = await client.append(
        main,
        0,
        [
            e(main, "run.started", "r1", 0),
            e(main, "turn.started", turn.id, 0),
            e(main, "action.started", model.id, 0.1),
            spawn,
            e(main, "attempt.completed", a_model.id, 2.6),
            e(
                main,
                "cost.recorded",
                model.id,
                2.6,
                model="claude-sonnet",
                amount="0.0123",
                input_tokens=1000,
                output_tokens=200,
                action_id=model.id,
                attempt_id=a_model.id,
                **cost,
            ),
            e(main, "action.completed", model.id, 2.6),
            e(main, "action.started", edit.id, 3),
            e(main, "attempt.requested", a_edit.id, 3, attempt_no=1),
            e(main, "action.started", read.id, 3),
            e(main, "attempt.requested", a_read1.id, 3, attempt_no=1),
            e(main, "attempt.failed", a_read1.id, 3.25),
            e(main, "attempt.requested", a_read2.id, 3.5, attempt_no=2),
            e(main, "attempt.completed", a_read2.id, 3.75),
            e(main, "hitl.paused", main.id, 4, pause_id="p-approve", trigger="write to prod"),
            e(main, "hitl.responded", main.id, 5, pause_id="p-approve", decision="approved"),
            e(main, "hitl.paused", main.id, 6, pause_id="p-pending", trigger="delete files"),
        ],
    )
    # The sub-agents' first events point at what spawned them (Korg §2b).
    causes = {}
    for lane, cause in ((sub1, spawn["id"]), (sub1a, "sub1"), (sub2, spawn["id"]), (r2, None)):
        first = e(lane, "stream.text_delta", lane.id, 1, cause=causes.get(cause, cause), text="hi")
        causes["sub1"] = causes.get("sub1") or first["id"]
        last = await client.append(lane, 0, [first])
    return {
        "main": main,
        "sub1": sub1,
        "sub1a": sub1a,
        "sub2": sub2,
        "r2": r2,
        "attempts": {"model": a_model, "edit": a_edit, "read1": a_read1, "read2": a_read2},
        "last": max(receipt.positions[-1], last.positions[-1]),
    }


async def test_session_view_shows_the_tree_and_what_is_open(client, actor, start_tail, browser):
    tail = await start_tail()
    w = await workload(client, actor)
    await wait_applied(tail.service, w["last"])
    page = await browser.page(tail.url + "/#/session/s1")
    await expect(page.locator("#session-status")).to_contain_text("Session s1 as of position")
    await expect(page.locator("#session-verify")).to_contain_text(
        "Chain intact: 21 events on 5 lanes verified."
    )
    await expect(page.locator("#session-verify")).to_have_class(re.compile("intact"))
    await expect(page.locator("#session-summary")).to_contain_text(
        "runs r1, r2; 5 lanes; 4 attempts (1 unresolved); cost 0.0123 USD"
    )

    # The spawn tree: run r1 > main > (researcher > fetcher, reviewer); run r2 > main.
    tree = page.locator("#session-tree")
    r1 = tree.locator("li[data-run=r1]")
    main = r1.locator(f":scope > ul > li[data-lane='{w['main'].id}']")
    await expect(main).to_contain_text("main")
    children = main.locator(":scope > ul > li")
    await expect(children).to_have_count(2)
    assert await children.evaluate_all("l => l.map(li => li.dataset.lane)") == [w["sub1"].id, w["sub2"].id]
    await expect(children.first.locator(":scope > ul > li")).to_have_attribute("data-lane", w["sub1a"].id)
    await expect(children.first).to_contain_text("subagent")
    await expect(tree.locator("li[data-run=r2] > ul > li")).to_have_attribute("data-lane", w["r2"].id)

    # Turns, actions, attempts: outcome, duration, cost; the open write is marked.
    rows = page.locator("#work-rows tr")
    await expect(rows).to_have_count(4)
    texts = [
        re.sub(r"\s+", " ", t)
        for t in await rows.evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.textContent).join(' | '))"
        )
    ]
    assert texts == [
        "main | 1 | model_call claude-sonnet | none / not_applicable | #1 | completed | 2.50 s | 0.0123 USD",
        "main | 1 | tool_call Edit | write / none | #1 | unresolved | | ",
        "main | 1 | tool_call Read | read / inherent | #1 | failed | 250 ms | ",
        "main | 1 | tool_call Read | read / inherent | #2 | completed | 250 ms | ",
    ]
    unresolved = page.locator("#work-rows tr.unresolved")
    await expect(unresolved).to_have_count(1)
    await expect(unresolved).to_have_attribute("data-attempt", w["attempts"]["edit"].id)
    await expect(page.locator("#session-pauses li.pending")).to_have_count(1)
    await expect(page.locator("#session-pauses li.pending")).to_contain_text(
        "Pending: pause p-pending on lane main (trigger delete files)"
    )
    await expect(page.locator("#session-pauses")).to_contain_text("1 answered, 1 pending.")
    await expect(page.locator("#events-rows tr")).to_have_count(21)

    # The causal tree: the sub-agents hang off the spawning model call
    # (position 4), the fetcher off the researcher's first event.
    causal = page.locator("#causal-rows tr")
    await expect(causal).to_have_count(21)
    researcher = page.locator(f"li[data-lane='{w['sub1'].id}']")
    await expect(researcher.locator(":scope > .spawned")).to_have_text(" · spawned by position 4")
    caused = await causal.evaluate_all("rows => rows.map(r => [r.dataset.position, r.cells[5].textContent])")
    assert caused[17:] == [["18", "#4"], ["19", "#18"], ["20", "#4"], ["21", "root"]]
    await screenshot(page, "session")

    await page.get_by_label("Only unresolved attempts").check()
    await expect(rows).to_have_count(1)

    # An unknown session is a clear message, not a blank page.
    await page.get_by_label("Session id").fill("no-such-session")
    await page.get_by_role("button", name="Open session").click()
    await expect(page.locator("#session-status")).to_contain_text("Cannot open session no-such-session")
    await expect(page.locator("#session-status")).to_contain_text("HTTP 404")


async def test_a_tampered_ledger_shows_the_verification_failure(client, actor, start_tail, browser):
    tail = await start_tail()
    w = await workload(client, actor)
    await wait_applied(tail.service, w["last"])
    db = sqlite3.connect(tail.service.model.path)
    try:
        ((position, body),) = db.execute(
            "SELECT position, body FROM events WHERE event_type = 'cost.recorded'"
        ).fetchall()
        event = msgspec.json.decode(body)
        event["payload"]["amount"] = "0.0001"  # someone makes the bill smaller
        assert (
            db.execute(
                "UPDATE events SET body = ? WHERE position = ?", (msgspec.json.encode(event), position)
            ).rowcount
            == 1
        )
        db.commit()
    finally:
        db.close()
    page = await browser.page(tail.url + "/#/session/s1")
    verdict = page.locator("#session-verify")
    await expect(verdict).to_contain_text("Chain verification FAILED: chain_fault (content_tampered)")
    await expect(verdict).to_contain_text(f"at position {position}, lane {w['main'].id} seq 6")
    await expect(verdict).to_have_class(re.compile("fault"))
    await screenshot(page, "session-tampered")


# -- costs -----------------------------------------------------------------------------------


async def test_costs_view_totals_and_plot(client, actor, start_tail, browser):
    tail = await start_tail()
    acme = await new_lane(client, actor, "s1", tenant="acme")
    beta_actor = await client.ensure_actor("beta", "agent:tests/beta@1", "agent")
    beta = await new_lane(client, beta_actor, "s2", tenant="beta")
    spend = [
        (acme, actor, "claude-sonnet", "0.50", 0),
        (acme, actor, "claude-haiku", "0.25", 30),
        (acme, actor, "claude-sonnet", "1.25", 90),
        (beta, beta_actor, "claude-haiku", "2", 150),
    ]
    heads: dict[str, int] = {}
    for lane, who, model, amount, second in spend:
        receipt = await client.append(
            lane,
            heads.get(lane.id, 0),
            [
                make_event(
                    lane.id,
                    "cost.recorded",
                    actor_id=who.id,
                    occurred_at=at(second),
                    payload={
                        "provider": "anthropic",
                        "model": model,
                        "amount": amount,
                        "currency": "USD",
                        "input_tokens": 100,
                        "output_tokens": 10,
                    },
                )
            ],
        )
        heads[lane.id] = receipt.last_seq
    await wait_applied(tail.service, receipt.positions[-1])
    page = await browser.page(tail.url + "/#/costs")
    # 150 s of spending: 5 s buckets (the smallest that keeps it under 120).
    await expect(page.locator("#costs-status")).to_contain_text("4 cost events")
    await expect(page.locator("#costs-status")).to_contain_text("buckets of 5 s")
    await expect(page.locator("#costs-totals tr")).to_have_text(["USD4.00440040"])
    await expect(page.locator("#costs-models tr")).to_have_text(
        ["anthropicclaude-haikuUSD2.25220020", "anthropicclaude-sonnetUSD1.75220020"]
    )
    await expect(page.locator("#costs-tenants tr")).to_have_text(["acmeUSD2.003", "betaUSD21"])
    plot = page.get_by_role("img", name=re.compile(r"^Cost in USD per \d+ s bucket, by model"))
    await expect(plot).to_be_visible()
    await expect(plot.locator("rect")).to_have_count(4)  # one bar per bucket with spending
    await expect(plot).to_have_attribute("aria-label", re.compile(r": 31 buckets,"))  # 0..150 s
    await expect(page.locator(".legend li")).to_have_text(["claude-haiku", "claude-sonnet"])
    await screenshot(page, "costs")
    form = page.locator("#costs-form")
    await form.get_by_role("textbox", name="Tenant").fill("beta")
    await form.get_by_role("radio", name="Tenant").check()  # plot by tenant
    await page.get_by_role("button", name="Load costs").click()
    await expect(page.locator("#costs-status")).to_contain_text("1 cost events")
    await expect(page.locator("#costs-totals tr")).to_have_text(["USD2110010"])
    await expect(page.locator("#costs-tenants tr")).to_have_text(["betaUSD21"])
    by_tenant = page.get_by_role("img", name=re.compile(r"^Cost in USD per \d+ s bucket, by tenant"))
    await expect(by_tenant.locator("rect")).to_have_count(1)
    await expect(page.locator(".legend li")).to_have_text(["beta"])
    await expect(page.locator("#costs-totals tr")).to_have_text(["USD2110010"])
    await expect(page.locator(".legend li")).to_have_text(["beta"])


# -- tokens, keyboard, accessibility ---------------------------------------------------------


async def test_token_keyboard_only_use_and_accessible_names(client, actor, start_tail, browser):
    """With per-tenant tokens the console works once the token is entered (it
    is kept in sessionStorage and sent as a bearer header, and as
    access_token to the live tail). Everything is done with the keyboard, and
    every control has an accessible name."""
    token = "acme-reader-token-0123456789"
    tail = await start_tail(access=AccessPolicy.from_tokens({"acme": token}))
    w = await workload(client, actor)
    await wait_applied(tail.service, w["last"])
    page = await browser.page(tail.url + "/#/tail")
    # Started by itself, and refused: no token yet.
    await expect(page.locator("#tail-status")).to_contain_text("The tail refused:")

    snapshot = await page.locator("body").aria_snapshot()
    for line in (
        'navigation "Views"',
        'link "Sessions"',
        'link "Live tail"',
        'link "Session"',
        'link "Costs"',
        'textbox "Access token"',
        'textbox "Session"',
        'textbox "Event type prefix"',
        'button "Start tail"',
        'button "Pause" [disabled]',
        'table "Events received',
    ):
        assert line in snapshot, (line, snapshot)
    unnamed = await page.evaluate("""() => [...document.querySelectorAll('input, button, a, select')]
        .filter(e => e.offsetParent !== null)
        .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                     && !e.textContent.trim()).map(e => e.outerHTML)""")
    assert unnamed == []

    async def tab_to(name: str, tag: str | None = None, key: str = "Tab") -> None:
        """Press Tab (or ``key``) until the focused control is named ``name``."""
        for _ in range(60):
            await page.keyboard.press(key)
            focused = await page.evaluate("""() => { const e = document.activeElement;
                const name = e.labels && e.labels[0] ? e.labels[0].textContent : e.textContent;
                return [e.tagName, name.trim()]; }""")
            if focused[1] == name and tag in (None, focused[0]):
                return
        raise AssertionError(f"{name!r} not reachable with {key}")

    # Without the token the tail and the session are refused, and the page says why.
    await page.locator("#tail-form").get_by_label("Session").fill("s1")
    await page.get_by_role("button", name="Start tail").click()
    await expect(page.locator("#tail-status")).to_contain_text("The tail refused:")
    await expect(page.locator("#tail-status")).to_contain_text("HTTP 401")
    await tab_to("Session", tag="A", key="Shift+Tab")  # back up to the navigation
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Session", exact=True)).to_be_visible()
    session_link = page.get_by_role("link", name="Session", exact=True)
    await expect(session_link).to_have_attribute("aria-current", "page")
    await tab_to("Session id")
    await page.keyboard.type("s1")
    await page.keyboard.press("Enter")
    await expect(page.locator("#session-status")).to_contain_text("HTTP 401")

    # The token, typed and submitted with the keyboard.
    await tab_to("Access token", key="Shift+Tab")
    await page.keyboard.type(token)
    await page.keyboard.press("Enter")
    await expect(page.locator("#token-state")).to_have_text("token set for this tab")
    assert await page.evaluate("sessionStorage.getItem('laneledger.access_token')") == token
    await tab_to("Session id")
    await page.keyboard.press("Enter")
    await expect(page.locator("#session-verify")).to_contain_text("Chain intact")
    await tab_to("Only unresolved attempts")
    await page.keyboard.press("Space")
    await expect(page.locator("#work-rows tr")).to_have_count(1)

    # The live tail sends the token too.
    await page.evaluate("location.hash = '#/tail'")
    await tab_to("Session", tag="INPUT")  # still holds s1
    await page.keyboard.press("Enter")
    await expect(page.locator("#tail-rows tr")).to_have_count(21)
    await expect(page.get_by_role("button", name="Pause", pressed=False)).to_be_enabled()
    await expect(page.get_by_role("region", name="Live tail events")).to_be_visible()


# -- the sessions index ------------------------------------------------------------------------


async def test_the_console_opens_on_the_sessions_index_which_follows_the_ledger(
    client, actor, start_tail, browser
):
    """The landing page lists the sessions, newest first, with their status,
    what is open and their cost; filters are a deep link; a session that
    starts while the page is open appears without a reload; a session's
    link opens it."""
    tail = await start_tail()
    w = await workload(client, actor)  # s1: running, an attempt open, a pause pending, a cost
    done = await new_lane(client, actor, "s-done", "r1")
    await client.append(
        done,
        0,
        [
            make_event(done.id, "run.started", actor_id=actor.id, subject_id="r1"),
            make_event(done.id, "run.completed", actor_id=actor.id, subject_id="r1"),
        ],
    )
    failed = await new_lane(client, actor, "s-failed", "r1")
    receipt = await client.append(
        failed, 0, [make_event(failed.id, "run.failed", actor_id=actor.id, subject_id="r1")]
    )
    await wait_applied(tail.service, max(w["last"], receipt.positions[-1]))
    page = await browser.page(tail.url + "/")
    await expect(page.get_by_role("heading", name="Sessions", exact=True)).to_be_visible()
    await expect(page.get_by_role("link", name="Sessions")).to_have_attribute("aria-current", "page")
    rows = page.locator("#sessions-rows tr")
    await expect(rows).to_have_count(3)
    assert await rows.evaluate_all("rows => rows.map(r => r.dataset.session)") == ["s-failed", "s-done", "s1"]
    s1 = page.locator("#sessions-rows tr[data-session=s1]")
    cells = await s1.locator("td").all_text_contents()
    # session, tenant, status, runs, lanes, events, first, last, open attempts, pauses, cost
    assert cells[:6] == ["s1", "acme", "running", "2", "5", "21"]
    assert cells[8:] == ["1", "1", "0.0123 USD"]
    await expect(s1.locator("td.attention")).to_have_count(2)
    await expect(page.locator("#sessions-rows tr[data-session=s-failed] td.status")).to_have_text("failed")
    await expect(page.locator("#sessions-rows tr[data-session=s-done] td.status")).to_have_text("completed")
    await screenshot(page, "sessions")

    # Filtering: the form, and the same as a deep link.
    await page.get_by_label("Status").select_option("unresolved")
    await page.get_by_role("button", name="Show sessions").click()
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-session", "s1")
    assert "#/sessions?status=unresolved" in page.url
    await page.goto(tail.url + "/#/sessions?status=failed")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-session", "s-failed")
    await expect(page.get_by_label("Status")).to_have_value("failed")

    # Live: a session that starts now shows up at the top, no reload.
    await page.goto(tail.url + "/#/sessions")
    await expect(rows).to_have_count(3)
    fresh = await new_lane(client, actor, "s-new", "r1")
    await fill(client, fresh, actor, 2)
    await expect(rows.first).to_have_attribute("data-session", "s-new", timeout=15_000)
    await expect(rows).to_have_count(4)

    # A session's link opens it.
    await page.get_by_role("link", name="s1", exact=True).click()
    await expect(page.locator("#session-status")).to_contain_text("Session s1 as of position")


# -- scale -----------------------------------------------------------------------------------

BIG = 100_000


@pytest.mark.timeout(300)  # writing 100k events through the sequencer on a busy 2-core box
@pytest.mark.slow
async def test_a_100k_event_session_stays_usable(nats_server, tmp_path, start_tail, browser):
    """100,000 events in one session, written through the real sequencer (its
    own process, so it has a core of its own) in appends of 1,000: the
    session view, the causal tree and the live tail page or cap what they
    render, so the document stays small."""
    sequencer = SequencerProcess(nats_server.url, tmp_path / "ledger.db", log_dir=tmp_path)
    sequencer.start()
    try:
        async with await LedgerClient.connect(nats_server.url, timeout=30.0) as client:
            await _big_session(client, await start_tail(), browser)
    finally:
        sequencer.stop()


async def _big_session(client, tail, browser) -> None:
    actor = await client.ensure_actor("acme", "agent:tests/main@1", "agent")
    lane = await new_lane(client, actor, "big", "r1")
    sub = await new_lane(client, actor, "big", "r1", "helper", kind="subagent", parent_lane_id=lane.id)
    turn = await client.create_turn(lane.id, 1)
    work, attempts = [], []
    for i in range(120):  # 120 attempts, every 6th left open
        action = await client.create_action(
            lane.id, turn.id, "tool_call", f"Read{i}", effect="read", idempotency="inherent"
        )
        attempt = await client.create_attempt(lane.id, action.id, 1)
        attempts.append(attempt)
        work.append(make_event(lane.id, "attempt.requested", actor_id=actor.id, subject_id=attempt.id))
        if i % 6:
            work.append(make_event(lane.id, "attempt.completed", actor_id=actor.id, subject_id=attempt.id))
    head = (await client.append(lane, 0, work)).last_seq
    await client.append(
        sub, 0, [make_event(sub.id, "stream.text_delta", actor_id=actor.id, payload={"text": "sub"})]
    )
    positions = await fill(client, lane, actor, BIG - len(work) - 1, start_seq=head, per_append=1000)
    await wait_applied(tail.service, positions[-1], timeout=120)
    last = positions[-1]

    page = await browser.page(tail.url + "/#/session/big")
    await expect(page.locator("#session-status")).to_contain_text("Session big as of position")
    await expect(page.locator("#session-summary")).to_contain_text("2 lanes; 120 attempts (20 unresolved)")
    await expect(page.locator("#work-page")).to_have_text("Rows 1–50 of 120")
    await expect(page.locator("#work-rows tr")).to_have_count(50)
    await expect(page.locator("#events-rows tr")).to_have_count(100)
    await expect(page.locator("#causal-rows tr")).to_have_count(200)
    await expect(page.locator("#session-verify")).to_contain_text(
        f"Chain intact: {BIG} events on 2 lanes verified."
    )
    await page.get_by_role("button", name="Latest events").click()
    await expect(page.locator("#events-page")).to_have_text(f"Positions {last - 99}–{last}")
    await page.get_by_role("button", name="Earlier events").click()
    await expect(page.locator("#events-page")).to_have_text(f"Positions {last - 199}–{last - 100}")
    await page.get_by_role("button", name="Next attempts").click()
    await expect(page.locator("#work-page")).to_have_text("Rows 51–100 of 120")
    await page.get_by_label("Only unresolved attempts").check()
    await expect(page.locator("#work-rows tr.unresolved")).to_have_count(20)
    await page.get_by_role("button", name="Next nodes").click()
    await expect(page.locator("#causal-page")).to_contain_text("Positions 201–400")
    rows_in_document = await page.locator("tr").count()
    assert rows_in_document < 1000, rows_in_document
    await screenshot(page, "session-100k")

    # The live tail backfills all 100,000 and keeps only the newest 500 rows.
    await page.evaluate("location.hash = '#/tail'")
    await start_live_tail(page, Session="big")
    await expect(page.locator("#tail-status")).to_contain_text(
        f"{BIG} events received, last position {last}", timeout=90_000
    )
    await expect(page.locator("#tail-rows tr")).to_have_count(500)
    assert (await tail_positions(page))[:2] == [last, last - 1]


# -- the event view ---------------------------------------------------------------------------


async def test_an_event_opens_with_its_record_cause_effects_and_content(client, actor, start_tail, browser):
    """From the live tail to one event (#/event/<position>): its chain fields
    and its lane verified, a link to its cause and to what it caused, the
    content its payload references read from the blob store a page at a
    time, and the whole record."""
    tail = await start_tail()
    lane = await new_lane(client, actor, "s-ev", "r1")
    root = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "root"})
    big = "a large tool output line\n" * 4000  # ~100 KB: stored as a blob, shown in two pages
    spawn = make_event(
        lane.id, "ext.tests.output", actor_id=actor.id, causation_id=root["id"], payload={"output": big}
    )
    first = await client.append(lane, 0, [root, spawn])
    child = make_event(lane.id, "stream.text_delta", actor_id=actor.id, causation_id=spawn["id"])
    last = await client.append(lane, 2, [child])
    await wait_applied(tail.service, last.positions[0])
    root_at, spawn_at = first.positions
    page = await browser.page(tail.url + "/#/tail")
    await expect(page.locator("#tail-rows tr")).to_have_count(3)
    await page.locator("#tail-rows").get_by_role("link", name=str(spawn_at), exact=True).click()
    await expect(page.get_by_role("heading", name=f"Event {spawn_at}")).to_be_visible()
    await expect(page.locator("#event-chain")).to_contain_text(f"ext.tests.output on lane {lane.id} seq 2")
    await expect(page.locator("#event-verify")).to_contain_text(
        "Its lane's chain is intact: 3 events verified."
    )
    await expect(page.locator("#event-caused li")).to_have_count(1)
    await expect(page.locator("#event-caused-summary")).to_have_text("It caused 1 event:")
    content = page.get_by_label("Content of payload.output")
    await expect(content).to_contain_text("a large tool output line")
    await expect(page.locator("#event-content .status")).to_contain_text(
        f"Showing 65536 of {len(big)} characters."
    )
    await page.get_by_role("button", name="More of payload.output").click()
    await expect(page.locator("#event-content .status")).to_have_text(f"All {len(big)} characters.")
    assert await content.evaluate("e => e.textContent.length") == len(big)
    await expect(page.get_by_label("The committed record, as JSON")).to_contain_text('"entry_hash"')
    await screenshot(page, "event")

    # Its cause, then back down to what the cause caused.
    await page.get_by_role("link", name=f"position {root_at}").click()
    await expect(page.get_by_role("heading", name=f"Event {root_at}")).to_be_visible()
    await expect(page.locator("#event-cause")).to_have_text("A root: it names no cause.")
    await expect(page.locator("#event-content")).to_contain_text("The payload references no blob.")
    await page.locator("#event-caused").get_by_role("link", name=f"position {spawn_at}").click()
    await expect(page.get_by_role("heading", name=f"Event {spawn_at}")).to_be_visible()

    # A position with no event is a clear message.
    await page.get_by_label("Position", exact=True).fill("99999")
    await page.get_by_role("button", name="Open event").click()
    await expect(page.locator("#event-status")).to_contain_text("Cannot open event 99999")
    await expect(page.locator("#event-status")).to_contain_text("HTTP 404")


async def test_an_erased_event_shows_as_erased(client, actor, start_tail, browser):
    """Once the tail has carried out an erasure (spec/erasure.md, Readers),
    the live tail and the event view say which erasure erased the content."""
    tail = await start_tail()
    lane = await new_lane(client, actor, "s-erased", "r1")
    secret = make_event(lane.id, "stream.text_delta", actor_id=actor.id, payload={"text": "a secret note"})
    [at] = (await client.append(lane, 0, [secret])).positions
    done = await client.erase("s-erased", actor_id=actor.id, reason="GDPR Art. 17")
    await wait_applied(tail.service, done.erasure.position)
    await eventually(lambda: tail.service.erasures_pending, until=lambda n: n == 0, what="the erasure")
    page = await browser.page(tail.url + "/#/tail")
    row = page.locator(f'#tail-rows tr[data-position="{at}"]')
    await expect(row).to_contain_text(f"erased by erasure {done.erasure_id}")
    await expect(row).not_to_contain_text("a secret note")
    await row.get_by_role("link", name=str(at), exact=True).click()
    await expect(page.locator("#event-chain")).to_contain_text(
        f"Its content was erased by erasure {done.erasure_id} (position {done.erasure.position})."
    )
    await expect(page.get_by_label("The committed record, as JSON")).not_to_contain_text("a secret note")


# -- accessibility ------------------------------------------------------------------------------


async def test_no_view_has_a_serious_accessibility_violation(client, actor, start_tail, browser):
    """axe-core (the copy axe-playwright-python bundles, pinned in the dev
    extra) finds no serious or critical violation in any view, filled with
    the workload's data."""
    from axe_playwright_python.async_playwright import Axe

    tail = await start_tail()
    w = await workload(client, actor)
    await wait_applied(tail.service, w["last"])
    axe = Axe()
    page = await browser.page(tail.url + "/")
    views = {
        "sessions": ("#/sessions", "#sessions-rows tr"),
        "tail": ("#/tail", "#tail-rows tr"),
        "session": ("#/session/s1", "#work-rows tr"),
        "event": (f"#/event/{w['last']}", "#event-record"),
        "costs": ("#/costs", "#costs-totals tr"),
    }
    found: dict[str, list[str]] = {}
    for name, (fragment, filled) in views.items():
        await page.evaluate(f"location.hash = {fragment!r}")
        await expect(page.locator(filled).first).to_be_visible()
        results = await axe.run(page)
        assert results.response["testEngine"]["name"] == "axe-core"  # it ran, on this page
        assert fragment in results.response["url"]
        serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
        if serious:
            found[name] = [results.generate_report(v["id"]) for v in serious]
    assert found == {}, "\n".join(r for reports in found.values() for r in reports)
