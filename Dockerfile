# syntax=docker/dockerfile:1
# servegate: one image running the gateway and the status controller (`serve --kubernetes`), and the CLI.
# Build: docker build -t servegate .        Run: docker run -p 8080:8080 -p 9090:9090 servegate demo

# ---- build: compile TypeScript with the dev dependencies -----------------------------------------------------
FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: `prepare` (tsc) would run before the sources are here.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npx tsc -p tsconfig.json && chmod 0755 dist/cli/main.js

# ---- deps: production dependencies only ------------------------------------------------------------------------
FROM node:22-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# No typescript here, so `prepare` must not run.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# ---- runtime ---------------------------------------------------------------------------------------------------
FROM node:22-bookworm-slim AS runtime
LABEL org.opencontainers.image.title="servegate" \
      org.opencontainers.image.description="Gateway and operator for model serving on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV NODE_ENV=production
# jemalloc as the process's malloc: glibc's heap keeps the native memory of connections that have closed (it shrinks
# only from the top), so 5 s after a burst of 9,900 streams RSS stayed 55 % above its baseline; with jemalloc it came
# back to within 3 % (docs/performance.md, Part E). One path for every architecture; if the file were missing, the
# loader would warn and go on with glibc's malloc. background_thread: jemalloc's own threads give freed pages back to
# the system on a clock (over about 10 s); without them it does so only while the process allocates, so an idle
# gateway kept what a burst had freed (Part E: 118.7 MB after a warm-up, the same 15 and 18 s later; with them 121 MB
# fell to 77 MB in 15 s). dirty_decay_ms:1000: pages freed for a second go back to the system (the default keeps them
# 10 s): after 9,900 streams ended, RSS settled 10.7-11.2 % above its baseline instead of 15.3-17.6 %, with CPU per
# event within the runs' spread (bench Part E; the runs in docs/decisions.md, "jemalloc as the image's malloc").
RUN apt-get update \
    && apt-get install -y --no-install-recommends libjemalloc2 \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(ls /usr/lib/*-linux-gnu/libjemalloc.so.2 | head -n 1)" /usr/local/lib/libjemalloc.so.2
ENV LD_PRELOAD=/usr/local/lib/libjemalloc.so.2
ENV MALLOC_CONF=background_thread:true,dirty_decay_ms:1000
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY crds ./crds
COPY examples ./examples
# `servegate ...` on the PATH, e.g. kubectl exec deploy/servegate -- servegate keys create ... -o yaml
RUN ln -s /app/dist/cli/main.js /usr/local/bin/servegate
# Non-root, numeric so that runAsNonRoot can verify it (the chart runs it as 65532 too).
USER 65532:65532
EXPOSE 8080 9090
# Exec form: node is PID 1 and receives SIGTERM itself (graceful drain); no shell, no npm in between.
ENTRYPOINT ["node", "dist/cli/main.js"]
CMD ["serve", "--kubernetes"]
