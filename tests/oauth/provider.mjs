// A real OpenID provider (oidc-provider, installed by tests/oauth/setup.sh)
// for haip's OAuth 2.1 resource-server tests, on 127.0.0.1 only.
//
//   node provider.mjs [--resource URL ...] [--scopes "a b c"] [--port 0]
//                     [--max-lifetime SECONDS] [--no-oauth-metadata]
//
// oidc-provider serves its metadata at both /.well-known/openid-configuration
// and the RFC 8414 /.well-known/oauth-authorization-server;
// --no-oauth-metadata makes the latter a 404, as on a provider that has only
// OpenID discovery (to test a client's fallback).
//
// Prints one JSON line on stdout once it listens, e.g.
//   {"issuer":"http://127.0.0.1:41234","admin":"http://127.0.0.1:41234/__test",...}
// and serves until its standard input closes when that is a pipe (a test
// drops the child's piped stdin), SIGTERM/SIGINT, or --max-lifetime (default
// 1800 s) runs out.
// Everything else it says goes to stderr. See README.md beside this file for
// the clients, the resources, the admin endpoints under /__test and the
// claims the tokens carry.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

// oidc-provider writes its notices with console.info: stdout carries only
// the ready line.
console.log = console.error;
console.info = console.error;

const here = path.dirname(fileURLToPath(import.meta.url));

function fail(message) {
  process.stderr.write(`provider.mjs: ${message}\n`);
  process.exit(2);
}

// --- arguments ---------------------------------------------------------------

let args;
try {
  ({ values: args } = parseArgs({
    options: {
      resource: { type: 'string', multiple: true, default: [] },
      scopes: { type: 'string', default: 'users:write tickets:write tools:read' },
      port: { type: 'string', default: '0' },
      'max-lifetime': { type: 'string', default: '1800' },
      'no-oauth-metadata': { type: 'boolean', default: false },
    },
    strict: true,
    allowPositionals: false,
  }));
} catch (err) {
  fail(`${err.message}\nusage: node provider.mjs [--resource URL ...] [--scopes "a b c"] [--port 0] [--max-lifetime SECONDS] [--no-oauth-metadata]`);
}

const port = Number(args.port);
if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`--port must be 0..65535, got ${args.port}`);
const maxLifetime = Number(args['max-lifetime']);
if (!(maxLifetime > 0)) fail(`--max-lifetime must be a positive number of seconds, got ${args['max-lifetime']}`);
const resourceScopes = args.scopes.split(' ').filter(Boolean);
if (resourceScopes.length === 0) fail('--scopes must name at least one scope');

// The resource that is not haip's: tokens for another audience.
const OTHER_RESOURCE = 'http://other.example/api';
const ACCESS_TOKEN_TTL = 600;

// --- oidc-provider, from the directory setup.sh installs it into -------------

const deps = process.env.HAIP_CONFORMANCE_DEPS || path.join(here, '..', '..', 'target', 'conformance-deps');
const modules = path.join(deps, 'oauth', 'node_modules');
const providerDir = path.join(modules, 'oidc-provider');
if (!fs.existsSync(path.join(providerDir, 'package.json'))) {
  fail(`oidc-provider is not installed under ${modules}: run \`bash tests/oauth/setup.sh\``);
}
const providerVersion = JSON.parse(fs.readFileSync(path.join(providerDir, 'package.json'), 'utf8')).version;
const moduleUrl = (rel) => pathToFileURL(path.join(providerDir, rel)).href;
const { default: Provider, errors } = await import(moduleUrl('lib/index.js'));
// One in-memory store shared by every Provider instance this process builds:
// a key rotation rebuilds the Provider, and registered clients, grants,
// sessions and opaque tokens live on.
const { default: MemoryAdapter } = await import(moduleUrl('lib/adapters/memory_adapter.js'));
const { default: LRU } = await import(moduleUrl('lib/helpers/lru.js'));
const store = new LRU({ maxSize: 100000 });

// --- keys --------------------------------------------------------------------

function newKid(prefix) {
  return `${prefix}-${crypto.randomBytes(6).toString('hex')}`;
}

function newRsaKey() {
  const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { alg: 'RS256', kid: newKid('rs'), privateKey };
}

function newEcKey() {
  const { privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return { alg: 'ES256', kid: newKid('es'), privateKey };
}

function privateJwk(key) {
  return { ...key.privateKey.export({ format: 'jwk' }), kid: key.kid, alg: key.alg, use: 'sig' };
}

function publicJwk(key) {
  return { ...crypto.createPublicKey(key.privateKey).export({ format: 'jwk' }), kid: key.kid, alg: key.alg, use: 'sig' };
}

const keys = {
  rsa: newRsaKey(), // signs every RS256 token; replaced by /__test/rotate
  retired: [], // RSA keys still published after a rotation with keep_old
  ec: newEcKey(), // published too; signs the `?es256` resource's tokens
};

// --- clients -----------------------------------------------------------------

const CLIENTS = {
  test: { id: 'haip-test', secret: 'haip-test-secret' },
  testPost: { id: 'haip-test-post', secret: 'haip-test-post-secret' },
  introspector: { id: 'haip-introspector', secret: 'haip-introspector-secret' },
  public: { id: 'haip-public', redirect: 'http://127.0.0.1/callback' },
};

// --- resource servers --------------------------------------------------------

// indicator -> getResourceServerInfo's answer. For each haip resource R:
//   R          JWT access token, RS256, aud R
//   R?opaque   opaque access token, aud R (introspect it)
//   R?es256    JWT access token, ES256, aud R
// and OTHER_RESOURCE: JWT, RS256, aud OTHER_RESOURCE.
const resourceServers = new Map();

function addResource(resource) {
  let url;
  try {
    url = new URL(resource);
  } catch {
    throw new Error(`resource ${JSON.stringify(resource)} is not an absolute URL`);
  }
  if (url.hash || resource.includes('#')) throw new Error(`resource ${resource} must not have a fragment`);
  const scope = resourceScopes.join(' ');
  const jwt = (alg) => ({
    scope, audience: resource, accessTokenTTL: ACCESS_TOKEN_TTL, accessTokenFormat: 'jwt', jwt: { sign: { alg } },
  });
  resourceServers.set(resource, jwt('RS256'));
  resourceServers.set(`${resource}?es256`, jwt('ES256'));
  resourceServers.set(`${resource}?opaque`, {
    scope, audience: resource, accessTokenTTL: ACCESS_TOKEN_TTL, accessTokenFormat: 'opaque',
  });
}

for (const resource of args.resource) {
  try {
    addResource(resource);
  } catch (err) {
    fail(`--resource: ${err.message}`);
  }
}
resourceServers.set(OTHER_RESOURCE, {
  scope: resourceScopes.join(' '),
  audience: OTHER_RESOURCE,
  accessTokenTTL: ACCESS_TOKEN_TTL,
  accessTokenFormat: 'jwt',
  jwt: { sign: { alg: 'RS256' } },
});

// --- the provider ------------------------------------------------------------

const cookieKeys = [crypto.randomBytes(32).toString('base64url')];
const allScopes = ['openid', 'offline_access', ...resourceScopes];

function configuration() {
  return {
    adapter: (name) => new MemoryAdapter(name, store),
    // Signing keys: the current RSA key first (oidc-provider signs with the
    // first key of an algorithm), then retired ones (verify only), the EC key.
    jwks: { keys: [keys.rsa, ...keys.retired, keys.ec].map(privateJwk) },
    cookies: { keys: cookieKeys },
    scopes: allScopes,
    clients: [
      {
        client_id: CLIENTS.test.id,
        client_secret: CLIENTS.test.secret,
        token_endpoint_auth_method: 'client_secret_basic',
        grant_types: ['client_credentials'],
        response_types: [],
        redirect_uris: [],
        scope: allScopes.join(' '),
      },
      {
        client_id: CLIENTS.testPost.id,
        client_secret: CLIENTS.testPost.secret,
        token_endpoint_auth_method: 'client_secret_post',
        grant_types: ['client_credentials'],
        response_types: [],
        redirect_uris: [],
        scope: allScopes.join(' '),
      },
      {
        client_id: CLIENTS.introspector.id,
        client_secret: CLIENTS.introspector.secret,
        token_endpoint_auth_method: 'client_secret_basic',
        grant_types: [],
        response_types: [],
        redirect_uris: [],
      },
      {
        client_id: CLIENTS.public.id,
        token_endpoint_auth_method: 'none',
        application_type: 'native',
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        redirect_uris: [CLIENTS.public.redirect],
      },
    ],
    features: {
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      introspection: {
        enabled: true,
        // Any authenticated confidential client may introspect any token.
        allowedPolicy: async (ctx, client) => client.clientAuthMethod !== 'none',
      },
      revocation: {
        enabled: true,
        allowedPolicy: async (ctx, client, token) => token.clientId === client.clientId,
      },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async () => undefined,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (ctx, indicator) => {
          const info = resourceServers.get(indicator);
          if (!info) throw new errors.InvalidTarget(`unknown resource indicator ${indicator}`);
          return info;
        },
      },
    },
    // PKCE (S256) for every authorization code request, as OAuth 2.1 wants.
    pkce: { required: () => true },
    ttl: {
      AccessToken: ACCESS_TOKEN_TTL,
      ClientCredentials: ACCESS_TOKEN_TTL,
      AuthorizationCode: 60,
      IdToken: 600,
      RefreshToken: 3600,
      Grant: 3600,
      Interaction: 600,
      Session: 3600,
    },
    findAccount: async (ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
    // Errors as JSON, so a scripted browser reports them readably.
    renderError: async (ctx, out) => {
      ctx.type = 'json';
      ctx.body = out;
    },
  };
}

let provider;
let handler;

function build(issuer) {
  provider = new Provider(issuer, configuration());
  provider.on('server_error', (ctx, err) => process.stderr.write(`provider.mjs: server_error: ${err.stack}\n`));
  handler = provider.callback();
}

// --- admin endpoints ---------------------------------------------------------

const stats = {
  jwks_fetches: 0,
  discovery_fetches: 0,
  introspections: 0,
  oauth_metadata_fetches: 0,
  token_requests: 0,
  registrations: 0,
};
const counted = new Map([
  ['/jwks', 'jwks_fetches'],
  ['/.well-known/openid-configuration', 'discovery_fetches'],
  ['/token/introspection', 'introspections'],
  ['/.well-known/oauth-authorization-server', 'oauth_metadata_fetches'],
  ['/token', 'token_requests'],
  ['/reg', 'registrations'],
]);

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function b64url(data) {
  return Buffer.from(data).toString('base64url');
}

// Signs `claims` exactly as given (nothing added) with one of the keys.
function signJwt(claims, header, which) {
  let key;
  let defaults;
  switch (which) {
    case 'rsa':
      key = keys.rsa.privateKey;
      defaults = { alg: 'RS256', typ: 'at+jwt', kid: keys.rsa.kid };
      break;
    case 'ec':
      key = keys.ec.privateKey;
      defaults = { alg: 'ES256', typ: 'at+jwt', kid: keys.ec.kid };
      break;
    case 'foreign': // a key nobody publishes, under the current kid
      key = newRsaKey().privateKey;
      defaults = { alg: 'RS256', typ: 'at+jwt', kid: keys.rsa.kid };
      break;
    default:
      throw new HttpError(400, `"key" must be "rsa", "ec" or "foreign", got ${JSON.stringify(which)}`);
  }
  const fullHeader = { ...defaults, ...header };
  const input = `${b64url(JSON.stringify(fullHeader))}.${b64url(JSON.stringify(claims))}`;
  const ecKey = key.asymmetricKeyType === 'ec';
  if (fullHeader.alg !== (ecKey ? 'ES256' : 'RS256')) {
    // The header may claim any alg (an attack test); the signature is the key's own.
    process.stderr.write(`provider.mjs: /__test/sign: header alg ${fullHeader.alg}, signed ${ecKey ? 'ES256' : 'RS256'}\n`);
  }
  const signature = crypto.sign('sha256', Buffer.from(input), ecKey ? { key, dsaEncoding: 'ieee-p1363' } : key);
  return `${input}.${signature.toString('base64url')}`;
}

async function readJson(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 1 << 20) throw new HttpError(413, 'body over 1 MiB');
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8').trim();
  if (!text) return {};
  try {
    const value = JSON.parse(text);
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new Error('not an object');
    return value;
  } catch (err) {
    throw new HttpError(400, `body is not a JSON object: ${err.message}`);
  }
}

async function admin(req, res, pathname, issuer) {
  const route = `${req.method} ${pathname}`;
  let body;
  switch (route) {
    case 'GET /__test/stats':
      body = stats;
      break;
    case 'POST /__test/stats/reset':
      for (const name of Object.keys(stats)) stats[name] = 0;
      body = stats;
      break;
    case 'POST /__test/rotate': {
      const { keep_old: keepOld = false } = await readJson(req);
      if (typeof keepOld !== 'boolean') throw new HttpError(400, '"keep_old" must be a boolean');
      const old = keys.rsa;
      if (keepOld) keys.retired.unshift(old);
      else keys.retired = [];
      keys.rsa = newRsaKey();
      build(issuer);
      body = { kid: keys.rsa.kid, old_kid: old.kid, published: [keys.rsa, ...keys.retired].map((k) => k.kid) };
      process.stderr.write(`provider.mjs: rotated ${old.kid} -> ${keys.rsa.kid} (keep_old: ${keepOld})\n`);
      break;
    }
    case 'POST /__test/sign': {
      const { claims, header = {}, key = 'rsa' } = await readJson(req);
      if (claims === null || typeof claims !== 'object' || Array.isArray(claims)) {
        throw new HttpError(400, '"claims" must be a JSON object');
      }
      if (header === null || typeof header !== 'object' || Array.isArray(header)) {
        throw new HttpError(400, '"header" must be a JSON object');
      }
      body = { token: signJwt(claims, header, key) };
      break;
    }
    case 'GET /__test/public-jwk':
      body = publicJwk(keys.rsa);
      break;
    case 'GET /__test/public-jwk/ec':
      body = publicJwk(keys.ec);
      break;
    case 'POST /__test/resources': {
      const { resource } = await readJson(req);
      if (typeof resource !== 'string') throw new HttpError(400, '"resource" must be a string');
      try {
        addResource(resource);
      } catch (err) {
        throw new HttpError(400, err.message);
      }
      body = { resources: [...resourceServers.keys()] };
      break;
    }
    case 'GET /__test/resources':
      body = { resources: [...resourceServers.keys()] };
      break;
    default:
      throw new HttpError(404, `no admin endpoint ${route}`);
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

// --- the server --------------------------------------------------------------

const server = http.createServer((req, res) => {
  const pathname = new URL(req.url, 'http://127.0.0.1').pathname;
  if (pathname === '/__test' || pathname.startsWith('/__test/')) {
    admin(req, res, pathname, provider.issuer).catch((err) => {
      const status = err instanceof HttpError ? err.status : 500;
      if (status === 500) process.stderr.write(`provider.mjs: ${route(req)}: ${err.stack}\n`);
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: err.message }));
    });
    return;
  }
  const counter = counted.get(pathname);
  if (counter) stats[counter] += 1;
  if (args['no-oauth-metadata'] && pathname === '/.well-known/oauth-authorization-server') {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: 'not_found', error_description: 'no RFC 8414 metadata here (--no-oauth-metadata)' }));
    return;
  }
  handler(req, res);
});

function route(req) {
  return `${req.method} ${req.url}`;
}

server.on('error', (err) => fail(`cannot listen on 127.0.0.1:${port}: ${err.message}`));

server.listen(port, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  build(issuer);
  process.stdout.write(`${JSON.stringify({
    issuer,
    admin: `${issuer}/__test`,
    discovery: `${issuer}/.well-known/openid-configuration`,
    jwks_uri: `${issuer}/jwks`,
    token_endpoint: `${issuer}/token`,
    introspection_endpoint: `${issuer}/token/introspection`,
    kid: keys.rsa.kid,
    resources: [...resourceServers.keys()],
    oauth_metadata: !args['no-oauth-metadata'],
    oidc_provider: providerVersion,
  })}\n`);
});

// --- lifetime ----------------------------------------------------------------

function stop(why) {
  process.stderr.write(`provider.mjs: stopping (${why})\n`);
  process.exit(0);
}

// Standard input as a lifeline only when it is a pipe or socket (a test's
// piped stdin): /dev/null or a terminal would end or never end the run.
const stdin = fs.fstatSync(0);
if (stdin.isFIFO() || stdin.isSocket()) {
  process.stdin.on('end', () => stop('stdin closed'));
  process.stdin.on('error', () => stop('stdin error'));
  process.stdin.resume();
}
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));
setTimeout(() => stop(`--max-lifetime ${maxLifetime} s`), maxLifetime * 1000).unref();
