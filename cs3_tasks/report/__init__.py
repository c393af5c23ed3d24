"""what is shown across scored result dirs: leaderboards and figures."""
