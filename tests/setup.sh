#!/usr/bin/env bash
# Install what the test suite needs besides the Python packages, pinned by the project's
# own files: the MCP conformance suite (and the node 22 it runs on), the filesystem server
# the install-line tests start through npx, the npm reference servers and Claude Code's CLI
# of the start-up tests, Debian's chromium for the dashboard's browser tests, and Debian's
# prometheus (with promtool) for the metrics tests (each only when it is missing; needs root
# or sudo). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
npm ci --prefix tests/conformance --no-audit --no-fund
npm ci --prefix tests/npm-filesystem --no-audit --no-fund
# The reference servers of the first-hour suite, Claude Code's CLI and the MCP Inspector
# (test_startup_real.py, test_claude_code.py, test_inspector_cli.py); Claude Code's CLI is a
# native binary shipped inside its npm package.
npm ci --prefix tests/npm-servers --no-audit --no-fund
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v chromium >/dev/null 2>&1; then
  $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends chromium
fi
# Pinned to bookworm's build: tests/integration/test_metrics.py scrapes with it.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends prometheus=2.42.0+ds-5+deb12u1
fi
# A throw-away PostgreSQL cluster per test session (tests/pg.py) for the shared store of
# several replicas; pinned to bookworm's build (the fixture runs initdb and postgres from
# /usr/lib/postgresql/15/bin, so nothing is started here).
if [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then
  $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends postgresql-15=15.18-0+deb12u1
fi
# Pinned to bookworm's builds: tests/integration/test_replicas*.py put three replicas behind
# them (deploy/haproxy.cfg, deploy/nginx.conf). Only the binaries are used: the packages'
# own services are never started by the tests (each test runs its own on loopback ports).
if ! command -v haproxy >/dev/null 2>&1; then
  $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends haproxy=2.6.12-1+deb12u4
fi
if ! command -v nginx >/dev/null 2>&1; then
  $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends nginx=1.22.1-9+deb12u11
fi
