"""Pure domain: no Redis, SQL, logging framework or clock reads (time is an argument)."""
