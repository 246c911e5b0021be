# skb-cni: build, install and package the frozen plugin suite.
#
#   make install    build, install into $(CNI_BIN_DIR) (default /opt/cni/bin, atomically), write the release
#                   files; installs only what building needs (compilers, Python, PyInstaller): CNI_BIN_DIR=/x
#   make test       installs what the tests need too (runtimes, Go plugins, ...) and runs bash tests/run
#   make build      dist/bin/: launchers + .skb bundle, ready to install
#   make dist       the release files: the tarball, its .sha256 and .sha512 (extract into /opt/cni/bin = install)
#   make build-deps what building needs (apt and the .venv); make deps: that and what the tests need
#   make bench      every bench/*.py inside tests/sandbox: ours vs the Go reference plugins
#   make mutation   mutation testing (mutmut, pinned below) of skb/cni/ and host-local's config and allocator
#                   against tests/unit, one module at a time, with a score per module (tests/mutation.py;
#                   configured in pyproject.toml's [tool.mutmut]; docs/MUTATION.md). Needs neither root nor
#                   the sandbox; ~20 min on 2 cores. MUTATION_MODULES="skb.cni.env ..." for some of them,
#                   MUTATION_JOBS=N workers (default 2)
#   make clean
#
# A fresh Debian 12 or 13 clone needs only make (README). `make install` never installs a container runtime
# or other test tooling: on a node whose runtime came from elsewhere, that could replace it.
#
#   make fresh-check [DIST=bookworm|trixie]  release check: the README's set-up commands in a fresh
#                                           debootstrap root (build/fresh-check; not part of make test)

SHELL       := /bin/bash
PYTHON      := /usr/bin/python3# Debian's interpreter: never a version-manager shim on PATH
VENV        := .venv
CNI_BIN_DIR ?= /opt/cni/bin
VERSION     := $(shell sed -n 's/^__version__ *= *"\(.*\)"/\1/p' skb/__init__.py)
ARCH        := amd64
TARBALL     := dist/skb-cni-linux-$(ARCH)-v$(VERSION).tgz
WORK        := build/work

# apt packages building and installing need, by the programs they provide: the interpreter that builds the
# bundle and its venv; gcc, musl-gcc (a wrapper: it needs gcc too) and readelf (binutils) for the launcher
# and the bundle. libpython3.<minor>, the shared library PyInstaller bundles, is added for whatever minor
# version $(PYTHON) is (see apt_install below): never pinned here. NOTICE is generated from the Debian
# copyright files of what the bundle ships, which these packages bring.
BUILD_APT_PKGS := python3 python3-venv gcc musl-tools binutils
# apt packages only the tests need: ip, tc, nstat (iproute2), sysctl (procps), unshare, nsenter, flock
# (util-linux), mount and umount (mount), iptables/ip6tables(-save,-restore) and nft for ptp's ipMasq, the Go
# reference plugins the differential tests compare with (/usr/lib/cni), openssl (a test API server's
# certificate), strace (slows tar down in the upgrade test), and the end-to-end tests' real runtimes,
# started only inside the tests' own sandbox (a temporary policy-rc.d keeps apt from starting their
# services on this machine).
TEST_APT_PKGS  := iproute2 procps util-linux mount iptables nftables containernetworking-plugins openssl strace \
                  podman containerd runc busybox-static catatonit

LOCK        := flock $(WORK)/.lock
SOURCES     := $(shell find skb plugins -name '*.py' 2>/dev/null) pyproject.toml
BUILD_STAMP := $(VENV)/.skb-build-deps
TEST_STAMP  := $(VENV)/.skb-test-deps

.PHONY: deps build-deps build install dist test bench mutation clean fresh-check

build-deps: $(BUILD_STAMP)
deps: $(TEST_STAMP)

# apt_install PKG...: installs the missing ones (apt-get update once, and only when one is missing), with
# no service started; then, for the build, the libpython of the interpreter's own minor version (two rounds:
# a fresh machine has no interpreter before the first).
APT_INSTALL = apt_missing() { for p in "$$@"; do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done; }; \
	updated=; apt_install() { \
	    [ -n "$$*" ] || return 0; echo "deps: apt-get install $$*"; \
	    [ -n "$$updated" ] || apt-get update -qq || return 1; updated=1; \
	    guard=; if [ ! -e /usr/sbin/policy-rc.d ]; then \
	        guard=/usr/sbin/policy-rc.d; printf '\#!/bin/sh\nexit 101\n' > $$guard; chmod 755 $$guard; fi; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$$@"; \
	    rc=$$?; [ -z "$$guard" ] || rm -f $$guard; return $$rc; }

# Re-run when pyproject.toml changes.
$(BUILD_STAMP): pyproject.toml
	@$(APT_INSTALL); apt_install $$(apt_missing $(BUILD_APT_PKGS)) && \
	pyver=$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])') && \
	apt_install $$(apt_missing libpython$$pyver)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[build]'
	touch $@

$(TEST_STAMP): $(BUILD_STAMP) pyproject.toml
	@$(APT_INSTALL); apt_install $$(apt_missing $(TEST_APT_PKGS))
	$(VENV)/bin/pip install -q -e '.[test,build]'
	touch $@

build: dist/bin/.skb

# `stage` renames the finished tree into place, so dist/bin is always whole; its .skb link stands for it.
# Builds in the same tree are serialized (flock): two PyInstaller runs must not share build/work.
dist/bin/.skb: $(WORK)/dist/skb-cni/skb-cni $(WORK)/launcher $(WORK)/libskbwarm.so build/bundle.py build/notice.py LICENSE
	$(LOCK) $(PYTHON) build/bundle.py stage --pyi $(WORK)/dist/skb-cni --launcher $(WORK)/launcher \
	    --warm-lib $(WORK)/libskbwarm.so --pyinstaller $(VENV)/bin/python --out dist/bin

$(WORK)/dist/skb-cni/skb-cni: $(BUILD_STAMP) build/skb-cni.spec build/entry.py $(SOURCES)
	@mkdir -p $(WORK)
	$(LOCK) $(VENV)/bin/pyinstaller --noconfirm --clean --log-level WARN \
	    --distpath $(WORK)/dist --workpath $(WORK)/pyi build/skb-cni.spec

# Static, so the launcher needs nothing from the node. musl keeps it ~30 KB; glibc's -static is the fallback.
# (The compiler is chosen when the recipe runs: on a fresh machine musl-gcc arrives with `deps`.)
LAUNCHER_SRC := build/launcher.c build/warm_client.c build/warm_snapshot.c
$(WORK)/launcher: $(LAUNCHER_SRC) build/launcher.h | $(BUILD_STAMP)
	@mkdir -p $(WORK)
	$$(command -v musl-gcc || echo gcc) -static -Os -s -Wall -Wextra -o $@ $(LAUNCHER_SRC)

# The same snapshot code for the warm server's children (loaded with ctypes; linked to the bundle's glibc;
# bound at load, in the server: a child resolves no symbol on its call's path).
$(WORK)/libskbwarm.so: build/warm_snapshot.c build/launcher.h | $(BUILD_STAMP)
	@mkdir -p $(WORK)
	gcc -shared -fPIC -O2 -s -Wall -Wextra -Wl,-z,now -DSKB_WARM_LIB -o $@ build/warm_snapshot.c

# Also writes the release tarball: one command gives both the installed suite and what to ship elsewhere.
install: build $(TARBALL)
	$(PYTHON) build/bundle.py install dist/bin $(CNI_BIN_DIR)

dist: $(TARBALL)

# The tarball with LICENSE, NOTICE and README.md inside, and its .sha256 and .sha512 beside it.
$(TARBALL): dist/bin/.skb README.md
	$(PYTHON) build/bundle.py dist dist/bin $@

test: deps
	bash tests/run

# Every bench/*.py against the built tree (dist/bin is laid out exactly as an install). Plugins run
# against namespaces: only inside the sandbox (new netns, private /run and /var/lib/cni).
bench: build
	@rc=0; for b in bench/*.py; do \
	    echo "== $$b"; tests/sandbox $(VENV)/bin/python $$b --bin-dir dist/bin || rc=1; done; exit $$rc

# Not part of `make test`. Unit tests only, so no apt package and no root: the venv with the test extras
# (made here when `make deps` has not run) and mutmut 3 (its 2.x has another configuration and no workers).
MUTMUT           := mutmut==3.8.1
MUTATION_JOBS    ?= 2
MUTATION_MODULES ?=
mutation:
	@test -e $(TEST_STAMP) || { test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV); \
	    $(VENV)/bin/pip install -q -e '.[test]'; }
	@$(VENV)/bin/pip show mutmut 2>/dev/null | grep -qx 'Version: $(subst mutmut==,,$(MUTMUT))' || \
	    $(VENV)/bin/pip install -q '$(MUTMUT)'
	$(VENV)/bin/python tests/mutation.py --jobs $(MUTATION_JOBS) $(MUTATION_MODULES)

# Not part of `make test`: minutes per distro, and it needs the Debian mirror and PyPI. DIST: one or both.
DIST ?= bookworm trixie
fresh-check:
	@command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
	@rc=0; for d in $(DIST); do build/fresh-check $$d || rc=1; done; exit $$rc

clean:
	rm -rf dist $(WORK)
