"""One agent's bad tokens never lock out the fleet on its address (issue 27, M1).

Agents on one machine, behind a NAT or a proxy share a client address. The
failed-authentication limit counts failures per address, but a valid token
is always checked and served: only the failures are refused past the limit.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.factories import AgentFactory, ProjectFactory

AGENTS = 50
REQUESTS_EACH = 6


@pytest.mark.django_db(transaction=True)
def test_fifty_agents_on_one_address_one_sending_bad_tokens_the_other_49_never_see_429(live_server, settings):
    settings.LEASEHOLD_AUTH_FAILURES_PER_MINUTE = 5
    project = ProjectFactory(slug="web")
    agents = [AgentFactory(projects=[project]) for _ in range(AGENTS)]
    good_statuses: list[int] = []
    bad_statuses: list[int] = []
    start = threading.Barrier(AGENTS)
    stop = threading.Event()

    def good(agent) -> None:
        headers = {"Authorization": f"Bearer {agent.api_token}"}
        with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as http:
            start.wait(timeout=60)
            for _ in range(REQUESTS_EACH):
                good_statuses.append(http.get("/api/v1/projects/").status_code)

    def bad() -> None:
        headers = {"Authorization": "Bearer lh_not-a-valid-token-at-all"}
        with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as http:
            start.wait(timeout=60)
            while not stop.is_set() or len(bad_statuses) < 20:
                bad_statuses.append(http.get("/api/v1/projects/").status_code)

    threads = [threading.Thread(target=good, args=(agent,)) for agent in agents[1:]]
    threads.append(threading.Thread(target=bad))
    for thread in threads:
        thread.start()
    for thread in threads[:-1]:
        thread.join(120)
    stop.set()
    threads[-1].join(120)

    assert len(good_statuses) == (AGENTS - 1) * REQUESTS_EACH
    assert set(good_statuses) == {200}
    # The bad token itself is refused, past the limit as RATE_LIMITED.
    assert set(bad_statuses) == {401, 429}
    assert bad_statuses[:5] == [401] * 5
