/**
 * The CLI's exit statuses, so a script can tell "fix the command line" and "not there"
 * from "keycap could not do it". docs/operating.md ("The `keycap` command") lists them.
 */
export const EXIT = {
  OK: 0,
  /** The service was unreachable, refused, or failed. */
  FAILURE: 1,
  /** The command line is wrong: unknown option, bad value, missing argument. */
  USAGE: 2,
  /** The entry, call or principal asked for does not exist. */
  NOT_FOUND: 3,
} as const;
