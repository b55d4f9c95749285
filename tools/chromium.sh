#!/usr/bin/env bash
# Installs Debian's chromium for the console's browser tests (test/it_console.spec.ts).
# playwright-core drives it through executablePath; `npx playwright install` cannot
# download browsers on machines without general internet access. Prints the path.
set -euo pipefail
for candidate in "${KEYCAP_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
  if [ -n "$candidate" ] && [ -x "$candidate" ]; then echo "$candidate"; exit 0; fi
done
if [ "$(id -u)" != "0" ]; then
  echo "chromium is not installed and this is not root: run 'sudo apt-get install -y chromium' (or set KEYCAP_CHROMIUM to a Chromium binary)" >&2
  exit 1
fi
echo "installing Debian's chromium (apt-get; a few minutes on first use)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
echo /usr/bin/chromium
