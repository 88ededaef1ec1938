"""What an agent's machine keeps and does beside the API (SPEC §15): the login, the attempts held, the git side.

- `config`: the login (server URL, agent token, default project);
  `state`: the attempts this machine holds, one state file per agent per
  attempt; `session`: what the CLI and the MCP server share (the client made
  from the login, claims written to the state files);
- `git`: the repository, the attempt's branch, its worktree, the facts
  (`errors.WorkspaceError` when it cannot);
  `gitfacts`: the facts of any checkout; `githooks` and `labels`: the commit
  trailer that names an attempt;
- the launcher's parts (SPEC §15.2, §15.3): `briefing` (what the command is
  given), `outcome` (how it chooses its end), `supervise` (it dies with its
  supervisor).

It imports `agent.client` and nothing of the CLI or the MCP server.
"""
