// A real OAuth 2.0 / OpenID Connect authorization server for the tests: the certified
// `oidc-provider` package (installed by scripts/install-peers.sh) over HTTPS, with the
// RFC 8693 token-exchange grant registered on it.
//
//   VMCP_NODE_MODULES=.peers/node/node_modules node oidc_provider.mjs --cert FILE --key FILE [--port 0] [--ttl SECONDS]
//                          --client ID:SECRET [--client ID:SECRET ...]
//
// stdout: one line "READY <port>" once listening; the issuer is https://localhost:<port>.
// Every client may use client_credentials and token exchange. A client_credentials
// token for resource `https://vmcp.test/` is a JWT with aud "vmcp" and sub = client id
// (the callers of the gateway); any other resource gets aud = that resource.
//
// Token exchange (grant_type urn:ietf:params:oauth:grant-type:token-exchange): the
// subject token must be a JWT this server signed (signature, issuer, expiry checked);
// the answer is a JWT access token with sub = the subject's sub, aud = `audience`,
// act = {sub: the exchanging client}, valid for --ttl seconds (default 300).
//
// Admin endpoints (plain JSON, for the tests only):
//   GET  /admin/stats            {"exchanges": n, "by_subject": {sub: n}, "client_credentials": n,
//                                "denied": n (refused exchanges of denied subjects)}
//   POST /admin/ttl?seconds=N    lifetime of tokens issued from now on
//   POST /admin/deny?sub=S       refuse every exchange of subject S (invalid_grant), as an
//                                IdP refuses a disabled or unentitled user
import https from 'node:https';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

// The packages live in the peers dir, not next to this file: resolve them there
// (VMCP_NODE_MODULES = $VMCP_PEERS_DIR/node/node_modules).
const fromPeers = createRequire(`${process.env.VMCP_NODE_MODULES}/`);
const load = (name) => import(pathToFileURL(fromPeers.resolve(name)).href);
const { default: Provider, errors } = await load('oidc-provider');
const jose = await load('jose');

const TOKEN_EXCHANGE = 'urn:ietf:params:oauth:grant-type:token-exchange';
const SUBJECT_TYPES = new Set([
  'urn:ietf:params:oauth:token-type:access_token',
  'urn:ietf:params:oauth:token-type:id_token',
  'urn:ietf:params:oauth:token-type:jwt',
]);
const GATEWAY_RESOURCE = 'https://vmcp.test/';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    cert: { type: 'string' },
    key: { type: 'string' },
    ttl: { type: 'string', default: '300' },
    client: { type: 'string', multiple: true, default: [] },
  },
});
if (!args.cert || !args.key) {
  console.error('--cert and --key are required');
  process.exit(2);
}

let ttl = Number(args.ttl);
const denied = new Set();
const stats = { exchanges: 0, by_subject: {}, client_credentials: 0 };

const { privateKey, publicKey } = await jose.generateKeyPair('RS256', { extractable: true });
const privateJwk = { ...(await jose.exportJWK(privateKey)), kid: 'test-key', alg: 'RS256', use: 'sig' };
const publicJwks = jose.createLocalJWKSet({
  keys: [{ ...(await jose.exportJWK(publicKey)), kid: 'test-key', alg: 'RS256', use: 'sig' }],
});

let app = null;
const server = https.createServer(
  { cert: fs.readFileSync(args.cert), key: fs.readFileSync(args.key) },
  (req, res) => {
    if (req.url === '/admin/stats' && req.method === 'GET') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(stats));
    } else if (req.url.startsWith('/admin/deny') && req.method === 'POST') {
      denied.add(new URL(req.url, 'https://x').searchParams.get('sub'));
      res.end(JSON.stringify({ denied: [...denied] }));
    } else if (req.url.startsWith('/admin/ttl') && req.method === 'POST') {
      ttl = Number(new URL(req.url, 'https://x').searchParams.get('seconds'));
      res.end(JSON.stringify({ ttl }));
    } else {
      app(req, res);
    }
  },
);
await new Promise((resolve) => server.listen(Number(args.port), '127.0.0.1', resolve));
const { port } = server.address();
const issuer = `https://localhost:${port}`;

const clients = args.client.map((pair) => {
  const at = pair.indexOf(':');
  return {
    client_id: pair.slice(0, at),
    client_secret: pair.slice(at + 1),
    grant_types: ['client_credentials', TOKEN_EXCHANGE],
    redirect_uris: [],
    response_types: [],
    token_endpoint_auth_method: 'client_secret_basic',
  };
});

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [privateJwk] },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => GATEWAY_RESOURCE,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource) => ({
        audience: resource === GATEWAY_RESOURCE ? 'vmcp' : resource,
        scope: 'openid tools',
        accessTokenFormat: 'jwt',
        accessTokenTTL: ttl,
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  scopes: ['openid', 'tools'],
});
provider.on('grant.success', (ctx) => {
  if (ctx.oidc.params.grant_type === 'client_credentials') stats.client_credentials += 1;
});

provider.registerGrantType(
  TOKEN_EXCHANGE,
  async (ctx) => {
    const params = ctx.oidc.params;
    if (!SUBJECT_TYPES.has(params.subject_token_type)) {
      throw new errors.InvalidRequest('unsupported subject_token_type');
    }
    if (!params.subject_token) throw new errors.InvalidRequest('subject_token is required');
    if (!params.audience) throw new errors.InvalidTarget('audience is required');
    let subject;
    try {
      ({ payload: subject } = await jose.jwtVerify(params.subject_token, publicJwks, { issuer }));
    } catch (e) {
      throw new errors.InvalidGrant(`subject_token is invalid: ${e.code || 'unverifiable'}`);
    }
    if (denied.has(String(subject.sub))) {
      stats.denied = (stats.denied || 0) + 1;
      throw new errors.InvalidGrant('the subject may not be exchanged');
    }
    stats.exchanges += 1;
    stats.by_subject[subject.sub] = (stats.by_subject[subject.sub] || 0) + 1;
    const now = Math.floor(Date.now() / 1000);
    const accessToken = await new jose.SignJWT({
      scope: params.scope || undefined,
      client_id: ctx.oidc.client.clientId,
      act: { sub: ctx.oidc.client.clientId },
      n: stats.exchanges,
    })
      .setProtectedHeader({ alg: 'RS256', kid: 'test-key', typ: 'at+jwt' })
      .setIssuer(issuer)
      .setSubject(String(subject.sub))
      .setAudience(params.audience)
      .setIssuedAt(now)
      .setExpirationTime(now + ttl)
      .setJti(crypto.randomUUID())
      .sign(privateKey);
    ctx.body = {
      access_token: accessToken,
      issued_token_type: 'urn:ietf:params:oauth:token-type:access_token',
      token_type: 'Bearer',
      expires_in: ttl,
      ...(params.scope ? { scope: params.scope } : {}),
    };
  },
  ['subject_token', 'subject_token_type', 'audience', 'scope', 'requested_token_type', 'actor_token', 'actor_token_type'],
);

app = provider.callback();
console.log(`READY ${port}`);
