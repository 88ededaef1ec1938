"""The lander: delivered work reaches the target branch through the merge queue (SPEC §21).

- `git`: the git primitives of a landing (fetch, the scratch worktree, one
  task merged by the method, the compare-and-swap push);
- `check`: the project's check command in the candidate tree, in a process
  group of its own, under a timeout, with the tail of its output;
- `engine`: one landing from fetch to push, with batches and bisection, and
  the retries from a moved target (no server: testable with git alone);
- `api`: the landing endpoints of the agent API;
- `lander`: `leasehold land`: claim, renew, land, finish; `--watch`.

HTTP only, like all of `agent/`: nothing here imports the server.
"""
