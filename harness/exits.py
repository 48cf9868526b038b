"""The exit codes every command shares and their help text: a leaf, which ``--help`` and the passes
over a run's records (``mmharness.passes``) both import."""

PASSED_EXIT, DIVERGED, USAGE_ERROR, COULD_NOT_TEST_EXIT, NOTHING_RAN = 0, 1, 2, 3, 4
EXIT_CODES = """exit codes:
  0    every check passed (hazards shown; skips are functions the target lacks)
  1    a divergence (under --strict: also a hazard or a could-not-test)
  2    usage error: bad option, unreadable file, unloadable target, an output that cannot be
       written (a full disk)
  3    the harness could not test part of the target, or a check did not finish, or (--against)
       a check that runs on the other target does not run here (lost coverage; --allow-lost)
  4    nothing ran: every check (or replayed case) was skipped
  130  interrupted by Ctrl-C (SIGINT); the report says so and keeps what was found
  143  terminated (SIGTERM); likewise"""
