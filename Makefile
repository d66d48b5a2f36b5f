# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8080
ICE_HOSTS ?=
VOICE ?= piper
AGENT ?= echo
WORKERS ?= 1
UDP_PORT ?= 0
STAMP := $(VENV)/.installed

.PHONY: run test test-fast screenshot lint fuzz bench-duplex bench-duplex-quick bench bench-load bench-load-designs bench-browser bench-http bench-http-quick browser clean help

help:
	@echo "make run    start the gateway + demo page (HOST, PORT, ICE_HOSTS, VOICE, AGENT, WORKERS, UDP_PORT)"
	@echo "make test   install everything the tests need and run them"
	@echo "make bench  latency benchmark (JSON in bench/results/)"
	@echo "make fuzz   long Hypothesis fuzz run (>=10k examples per parser) + 10 min of Schemathesis stateful on the HTTP API (~25-40 min)"

# Swagger UI for /docs, from npm (no CDN at run time); the page works without it.
SWAGGER_UI_VERSION := 5.35.0
SWAGGER_UI := web/vendor/swagger-ui/swagger-ui-bundle.js

$(SWAGGER_UI):
	@if command -v npm >/dev/null; then \
		mkdir -p web/vendor/swagger-ui && cd web/vendor && \
		npm pack --silent swagger-ui-dist@$(SWAGGER_UI_VERSION) >/dev/null && \
		tar xzf swagger-ui-dist-$(SWAGGER_UI_VERSION).tgz && \
		cp package/swagger-ui-bundle.js package/swagger-ui.css package/LICENSE swagger-ui/ && \
		rm -rf package swagger-ui-dist-$(SWAGGER_UI_VERSION).tgz; \
	else echo "note: npm not found; /docs will not render (GET /openapi.json works)"; fi

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install -e ".[voice,listen,speed,dev]"
	touch $(STAMP)

run: $(STAMP) $(SWAGGER_UI)
	$(BIN)/python -m gateway --host "$(HOST)" --port "$(PORT)" --ice-hosts "$(ICE_HOSTS)" \
		--voice "$(VOICE)" --duplex --agent "$(AGENT)" --workers "$(WORKERS)" --udp-port "$(UDP_PORT)"

# Debian Chromium for the browser tests (skipped where it cannot be installed: not root).
browser: $(STAMP)
	@if [ -x /usr/lib/chromium/chromium ] && command -v espeak-ng >/dev/null \
		&& command -v redis-server >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then .ci/install-browser.sh; \
	else echo "note: Debian chromium/espeak-ng/redis-server cannot be installed here; their tests will skip"; fi

test: $(STAMP) browser $(SWAGGER_UI)
	$(BIN)/pytest

test-fast: $(STAMP)
	$(BIN)/pytest -m "not browser and not voice"

screenshot: $(STAMP) browser  # the README's docs/screenshot.png, retaken
	UPDATE_SCREENSHOT=1 $(BIN)/pytest -q tests/browser/test_layout.py

fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q -p no:cacheprovider --hypothesis-show-statistics tests/fuzz

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m bench.latency

bench-browser: $(STAMP) browser
	$(BIN)/python -m bench.browser_latency

bench-load: $(STAMP)
	$(BIN)/python -m bench.load

bench-load-designs: $(STAMP)  # the shared UDP socket against one socket per session (issue 16)
	$(BIN)/python -m bench.load --server designs --ladder 250,500,750,1000

bench-duplex: $(STAMP) browser
	$(BIN)/python -m bench.duplex

bench-duplex-quick: $(STAMP) browser
	$(BIN)/python -m bench.duplex --quick

bench-http: $(STAMP)
	$(BIN)/python -m bench.http_stream

bench-http-quick: $(STAMP)
	$(BIN)/python -m bench.http_stream --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache bench/results
