# skb-cni: build, install and package the frozen plugin suite.
#
#   make deps       system packages (apt) and the .venv build/test environment
#   make build      dist/bin/: launchers + .skb bundle, ready to install
#   make install    into $(CNI_BIN_DIR) (default /opt/cni/bin), atomically, and the tarball; CNI_BIN_DIR=/x
#   make dist       dist/skb-cni-linux-amd64-v$(VERSION).tgz (extract into /opt/cni/bin = install)
#   make test       bash tests/run (builds, installs to a temp dir, runs pytest in a sandbox netns)
#   make bench      every bench/*.py inside tests/sandbox: ours vs the Go reference plugins
#   make clean
#
# A fresh Debian 12 or 13 clone needs only make (README): install depends on build, build on deps.
#
#   make fresh-check [DIST=bookworm|trixie]  release check: the README's set-up commands in a fresh
#                                           debootstrap root (build/fresh-check; not part of make test)

SHELL       := /bin/bash
PYTHON      := /usr/bin/python3# Debian's interpreter: never a version-manager shim on PATH
VENV        := .venv
CNI_BIN_DIR ?= /opt/cni/bin
VERSION     := $(shell sed -n 's/^__version__ *= *"\(.*\)"/\1/p' skb/__init__.py)
TARBALL     := dist/skb-cni-linux-amd64-v$(VERSION).tgz
WORK        := build/work

# apt packages the build and the tests need, by the programs they provide: the interpreter that builds the
# bundle and its venv; gcc, musl-gcc (a wrapper: it needs gcc too) and readelf (binutils) for the launcher
# and the bundle; ip, tc, nstat (iproute2), sysctl (procps), unshare, nsenter, flock (util-linux), mount
# and umount (mount), iptables/ip6tables(-save,-restore) and nft for ptp's ipMasq, the Go reference plugins
# the differential tests compare with (/usr/lib/cni). libpython3.<minor>, the shared library PyInstaller
# bundles, is added for whatever minor version $(PYTHON) is (see the deps recipe): never pinned here.
APT_PKGS    := python3 python3-venv gcc musl-tools binutils iproute2 procps util-linux mount \
               containernetworking-plugins iptables nftables
# apt packages of the end-to-end tests (tests/e2e): real runtimes, started only inside the tests' own
# sandbox. A temporary policy-rc.d keeps apt from starting their services on this machine.
E2E_APT_PKGS := podman containerd runc busybox-static catatonit

LOCK        := flock $(WORK)/.lock
SOURCES     := $(shell find skb plugins -name '*.py' 2>/dev/null) pyproject.toml
DEPS_STAMP  := $(VENV)/.skb-deps

.PHONY: deps build install dist test bench clean fresh-check

deps: $(DEPS_STAMP)

# Re-run when pyproject.toml changes. apt-get update runs once, and only when a package is missing. Two
# rounds: the interpreter first (a fresh machine has none), then the libpython of its own minor version.
$(DEPS_STAMP): pyproject.toml
	@apt_missing() { for p in "$$@"; do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done; }; \
	updated=; apt_install() { \
	    [ -n "$$*" ] || return 0; echo "deps: apt-get install $$*"; \
	    [ -n "$$updated" ] || apt-get update -qq || return 1; updated=1; \
	    guard=; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	        guard=/usr/sbin/policy-rc.d; printf '#!/bin/sh\nexit 101\n' > $$guard; chmod 755 $$guard; fi; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$$@"; \
	    rc=$$?; [ -z "$$guard" ] || rm -f $$guard; return $$rc; }; \
	apt_install $$(apt_missing $(APT_PKGS) $(E2E_APT_PKGS)) && \
	pyver=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	apt_install $$(apt_missing libpython$$pyver)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test,build]'
	touch $@

build: dist/bin/.skb

# `stage` renames the finished tree into place, so dist/bin is always whole; its .skb link stands for it.
# Builds in the same tree are serialized (flock): two PyInstaller runs must not share build/work.
dist/bin/.skb: $(WORK)/dist/skb-cni/skb-cni $(WORK)/launcher build/bundle.py
	$(LOCK) $(PYTHON) build/bundle.py stage --pyi $(WORK)/dist/skb-cni --launcher $(WORK)/launcher --out dist/bin

$(WORK)/dist/skb-cni/skb-cni: $(DEPS_STAMP) build/skb-cni.spec build/entry.py $(SOURCES)
	@mkdir -p $(WORK)
	$(LOCK) $(VENV)/bin/pyinstaller --noconfirm --clean --log-level WARN \
	    --distpath $(WORK)/dist --workpath $(WORK)/pyi build/skb-cni.spec

# Static, so the launcher needs nothing from the node. musl keeps it ~30 KB; glibc's -static is the fallback.
# (The compiler is chosen when the recipe runs: on a fresh machine musl-gcc arrives with `deps`.)
LAUNCHER_SRC := build/launcher.c build/warm_client.c build/warm_snapshot.c
$(WORK)/launcher: $(LAUNCHER_SRC) build/launcher.h | $(DEPS_STAMP)
	@mkdir -p $(WORK)
	$$(command -v musl-gcc || echo gcc) -static -Os -s -Wall -Wextra -o $@ $(LAUNCHER_SRC)

# Also writes the release tarball: one command gives both the installed suite and what to ship elsewhere.
install: build $(TARBALL)
	$(PYTHON) build/bundle.py install dist/bin $(CNI_BIN_DIR)

dist: $(TARBALL)

$(TARBALL): dist/bin/.skb
	$(PYTHON) build/bundle.py dist dist/bin $@

test: deps
	bash tests/run

# Every bench/*.py against the built tree (dist/bin is laid out exactly as an install). Plugins run
# against namespaces: only inside the sandbox (new netns, private /run and /var/lib/cni).
bench: build
	@rc=0; for b in bench/*.py; do \
	    echo "== $$b"; tests/sandbox $(VENV)/bin/python $$b --bin-dir dist/bin || rc=1; done; exit $$rc

# Not part of `make test`: minutes per distro, and it needs the Debian mirror and PyPI. DIST: one or both.
DIST ?= bookworm trixie
fresh-check:
	@command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
	@rc=0; for d in $(DIST); do build/fresh-check $$d || rc=1; done; exit $$rc

clean:
	rm -rf dist $(WORK)
