// A desktop MCP client built on the official MCP TypeScript SDK, run by
// TestMCPClientTypeScriptSDK. It connects to MCP_URL, signs in with MCP's
// authorization as the public client CLIENT_ID (a client metadata
// document), receiving the redirect on a loopback port of its own, then
// lists and calls tools and refreshes its token. Each step prints one JSON
// line; the test drives the browser on the "authorize" line. It never
// prints a token.
//
// Every host name of the test lives on this machine's loopback, behind
// certificates of the test's CA (CA_FILE): loopbackFetch connects there.

import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError, auth } from '@modelcontextprotocol/sdk/client/auth.js';

const { MCP_URL, CLIENT_ID, CA_FILE } = process.env;
const ca = fs.readFileSync(CA_FILE);

function say(step, fields = {}) {
  process.stdout.write(JSON.stringify({ step, ...fields }) + '\n');
}

// loopbackFetch is fetch over node:https, resolving every host to
// 127.0.0.1 and trusting the test CA. Redirects are returned, not followed.
async function loopbackFetch(input, init = {}) {
  let url = input;
  let method = init.method ?? 'GET';
  let headers = new Headers(init.headers ?? {});
  let body = init.body;
  if (input instanceof Request) {
    url = input.url;
    method = input.method;
    headers = new Headers(input.headers);
    body = await input.text();
  }
  url = new URL(url);
  if (body instanceof URLSearchParams) {
    if (!headers.has('content-type')) headers.set('content-type', 'application/x-www-form-urlencoded');
    body = body.toString();
  }
  return new Promise((resolve, reject) => {
    const req = https.request(url, {
      method,
      headers: Object.fromEntries(headers.entries()),
      ca,
      servername: url.hostname,
      lookup: (_host, opts, cb) => (opts && opts.all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4)),
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const h = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          for (const one of [].concat(v)) h.append(k, one);
        }
        const noBody = res.statusCode === 204 || res.statusCode === 304;
        resolve(new Response(noBody ? null : Buffer.concat(chunks), { status: res.statusCode, headers: h }));
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    if (init.signal) init.signal.addEventListener('abort', () => req.destroy(new Error('aborted')));
    if (body !== undefined && body !== null) req.write(body);
    req.end();
  });
}

// The loopback redirect: the browser brings the code here (RFC 8252 §7.3).
let gotCallback;
const callback = new Promise((resolve) => { gotCallback = resolve; });
const server = http.createServer((req, res) => {
  const u = new URL(req.url, 'http://127.0.0.1');
  if (u.pathname !== '/callback') {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { 'content-type': 'text/plain' }).end('You can close this window.');
  gotCallback(u.searchParams);
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const redirectUrl = `http://127.0.0.1:${server.address().port}/callback`;

// An OAuthClientProvider keeping everything in memory.
class Provider {
  constructor() { this.saved = {}; }
  get redirectUrl() { return redirectUrl; }
  get clientMetadataUrl() { return CLIENT_ID; }
  get clientMetadata() {
    return {
      client_name: 'Desk Assistant', redirect_uris: [redirectUrl], grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'], token_endpoint_auth_method: 'none',
    };
  }
  state() { return 'st4te-node'; }
  clientInformation() { return this.saved.client; }
  saveClientInformation(info) { this.saved.client = info; }
  tokens() { return this.saved.tokens; }
  saveTokens(tokens) { this.saved.tokens = tokens; }
  saveCodeVerifier(v) { this.saved.verifier = v; }
  codeVerifier() { return this.saved.verifier; }
  redirectToAuthorization(url) { say('authorize', { url: url.toString() }); }
}
const provider = new Provider();

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), { authProvider: provider, fetch: loopbackFetch });
  const client = new Client({ name: 'desk-assistant', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

try {
  // The first connection gets the 401 and starts the sign-in.
  const first = new StreamableHTTPClientTransport(new URL(MCP_URL), { authProvider: provider, fetch: loopbackFetch });
  try {
    await new Client({ name: 'desk-assistant', version: '1.0.0' }).connect(first);
    throw new Error('connected without signing in');
  } catch (e) {
    if (!(e instanceof UnauthorizedError)) throw e;
  }
  const q = await callback;
  say('callback', { state: q.get('state'), iss: q.get('iss'), code: q.has('code'), error: q.get('error') });
  await first.finishAuth(q.get('code'));
  const signedIn = provider.tokens();
  say('token', { token_type: signedIn.token_type, refresh: !!signedIn.refresh_token, client_id: provider.clientInformation().client_id });

  let { client } = await connect();
  const tools = await client.listTools();
  say('tools', { names: tools.tools.map((t) => t.name).sort() });
  const res = await client.callTool({ name: 'orders.lookup', arguments: { id: 'o1' } });
  say('call', { isError: !!res.isError, text: res.content.map((c) => c.text).join('') });
  await client.close();

  // Refresh, as the SDK does when a token is refused: auth() with a
  // refresh token in hand refreshes.
  const result = await auth(provider, { serverUrl: new URL(MCP_URL), fetchFn: loopbackFetch });
  const refreshed = provider.tokens();
  say('refresh', { result, rotated: refreshed.refresh_token !== signedIn.refresh_token,
    newAccess: refreshed.access_token !== signedIn.access_token });
  ({ client } = await connect());
  const again = await client.callTool({ name: 'catalog.search', arguments: {} });
  say('call', { isError: !!again.isError, text: again.content.map((c) => c.text).join('') });
  await client.close();
  say('done');
} catch (e) {
  say('error', { message: String(e && e.stack ? e.stack : e) });
  process.exitCode = 1;
} finally {
  server.close();
}
