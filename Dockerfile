# Gantry: build on Node 22 LTS, run the compiled CLI.
FROM node:22-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY providers ./providers
COPY console ./console
COPY scripts/build.mjs ./scripts/
RUN npm ci --no-audit --no-fund && npm prune --omit=dev

FROM node:22-bookworm-slim
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080 GANTRY_DATA_DIR=/data
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY bin ./bin
COPY config ./config
RUN mkdir -p /data && chown node:node /data
VOLUME /data
EXPOSE 8080
USER node
CMD ["node", "--max-semi-space-size=64", "bin/gantry.js", "serve"]
