// Calls every method of the TypeScript client (@ngrok/ngrok-api) for the services named in
// the config against a running stack, and prints one JSON result per method.
//
//   node compat.js <config.json>
//   config: {baseUrl, token, modulePath, services: [{name, recipe, routed: {method: bool}}]}
//
// Methods are found by reflection (the service object's prototype). A method whose route the
// app does not have yet (routed[method] === false) is reported "skip"; a method without a
// recipe "fail". The client's own defect on deletes (it parses the empty 204 body as JSON and
// rejects) is recognised, and the delete then checked by reading the resource back (404).
'use strict';
const crypto = require('crypto');
const fs = require('fs');

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const { Ngrok } = require(config.modulePath);
const client = new Ngrok({ apiToken: config.token, baseUrl: config.baseUrl });

const rnd = () => Math.random().toString(36).slice(2, 12);

// A fresh `ssh-ed25519` public key line (an SSH credential's public_key).
function sshKey() {
  const { publicKey } = crypto.generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x, 'base64url');
  const str = b => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(b.length);
    return Buffer.concat([len, b]);
  };
  const blob = Buffer.concat([str(Buffer.from('ssh-ed25519')), str(raw)]);
  return `ssh-ed25519 ${blob.toString('base64')} compat`;
}
const DENY = [{ name: 'r', expressions: [], actions: [{ type: 'deny' }] }];
const POLICY = JSON.stringify({ on_tcp_connect: DENY });

function service(path) {
  return path.split('.').reduce((obj, part) => obj[part], client);
}

function methods(svc) {
  return Object.getOwnPropertyNames(Object.getPrototypeOf(svc))
    .filter(name => name !== 'constructor' && !name.startsWith('_'))
    .sort();
}

function isDeleteDefect(err) {
  // node-fetch's json() on the empty 204 body
  return err instanceof SyntaxError || /JSON|Unexpected end/.test(String(err && err.message));
}

async function expectStatus(promise, statuses) {
  try {
    await promise;
  } catch (err) {
    if (err && statuses.includes(err.statusCode)) return err;
    throw new Error(`expected HTTP ${statuses.join('/')}, got ${JSON.stringify(err) || err}`);
  }
  throw new Error(`expected HTTP ${statuses.join('/')}, the call succeeded`);
}

async function deleted(call, readBack) {
  try {
    await call();
  } catch (err) {
    if (!isDeleteDefect(err)) throw err;
  }
  if (readBack) await expectStatus(readBack(), [404]);
}

const helpers = {
  backend: async () => (await client.backends.httpResponseBackends.create({ body: 'hi' })).id,
  ipPolicy: async () => (await client.ipPolicies.create({})).id,
  // a TCP edge's hostport must be an address the account reserved
  reservedAddr: async () => (await client.reservedAddrs.create({})).addr,
  tcpEdge: async () => (await client.edges.edgesTcp.create({
    hostports: [await helpers.reservedAddr()] })).id,
  httpsEdge: async () => (await client.edges.edgesHttps.create({})).id,
  ca: async () => (await client.certificateAuthorities.create({ caPem: config.caPem })).id,
  tlsEdge: async () => (await client.edges.edgesTls.create({})).id,
  // mutual TLS needs termination at the edge (ERR_NGROK_1694)
  terminatingTlsEdge: async () => (await client.edges.edgesTls.create({
    tlsTermination: { terminateAt: 'edge' } })).id,
  // one SSH CA for the certificates' recipes (at most 10 per account)
  sshCa: async () => {
    helpers.sshCaId = helpers.sshCaId || (await client.sshCertificateAuthorities.create({
      privateKeyType: 'ed25519' })).id;
    return helpers.sshCaId;
  },
  httpsRoute: async () => {
    const edgeId = await helpers.httpsEdge();
    const route = await client.edges.edgesHttpsRoutes.create({
      edgeId, matchType: 'path_prefix', match: `/${rnd()}` });
    return { edgeId, id: route.id };
  },
};

// CRUD over a collection: create(arg) get(id) list(beforeId, limit) update({id, ...}) delete(id)
function crud(createArg, updateArg = () => ({ metadata: 'm' }), extra = {}) {
  return async (svc, method) => {
    const make = async () => svc.create(await createArg());
    if (extra[method]) return extra[method](svc, await make());
    switch (method) {
      case 'create': {
        const obj = await make();
        if (!obj.id || !obj.uri.endsWith(obj.id)) throw new Error(`bad create: ${JSON.stringify(obj)}`);
        return;
      }
      case 'get': {
        const obj = await make();
        if ((await svc.get(obj.id)).id !== obj.id) throw new Error('get returned another id');
        return;
      }
      case 'list': {
        // two items and a page size of 1: the second page is asked for with beforeId
        const first = await make();
        const second = await make();
        const ids = (await svc.list(undefined, '1')).map(item => item.id);
        if (!ids.includes(first.id) || !ids.includes(second.id)) {
          throw new Error(`list lacks created items: ${ids}`);
        }
        return;
      }
      case 'update': {
        const obj = await make();
        const updated = await svc.update({ id: obj.id, ...(await updateArg()) });
        if (updated.id !== obj.id) throw new Error('update returned another id');
        return;
      }
      case 'delete': {
        const obj = await make();
        return deleted(() => svc.delete(obj.id), svc.get && (() => svc.get(obj.id)));
      }
      default:
        throw new Error(`no recipe for ${method}`);
    }
  };
}

function routes() {
  return async (svc, method) => {
    const edgeId = await helpers.httpsEdge();
    const make = () => svc.create({ edgeId, matchType: 'path_prefix', match: `/${rnd()}` });
    const obj = await make();
    const item = { edgeId, id: obj.id };
    switch (method) {
      case 'create': return;
      case 'get': if ((await svc.get(item)).id !== obj.id) throw new Error('get'); return;
      case 'update': {
        const updated = await svc.update({ ...item, matchType: '', match: '', metadata: 'm' });
        if (updated.metadata !== 'm') throw new Error('update'); return;
      }
      case 'delete': return deleted(() => svc.delete(item), () => svc.get(item));
      default: throw new Error(`no recipe for ${method}`);
    }
  };
}

// Edge modules: replace(arg) get(id | item) delete(id | item)
function module_(owner, build) {
  return async (svc, method) => {
    const made = await helpers[owner]();
    const key = typeof made === 'string' ? made : made;
    const arg = typeof made === 'string' ? { id: made } : { ...made };
    const replaced = await svc.replace({ ...arg, module: await build() });
    switch (method) {
      case 'replace': if (!replaced) throw new Error('replace returned nothing'); return;
      case 'get': await svc.get(key); return;
      case 'delete': return deleted(() => svc.delete(key), () => svc.get(key));
      default: throw new Error(`no recipe for ${method}`);
    }
  };
}

// Read-only views of what agents create: list works, an unknown id is a 404
function probe(prefix) {
  return async (svc, method) => {
    const unknown = `${prefix}_000000${'A'.repeat(21)}`;
    if (method === 'list') {
      if (!Array.isArray(await svc.list())) throw new Error('list is not an array');
      return;
    }
    const arg = method === 'update' ? { id: unknown } : unknown;  // update takes {id}
    const err = await expectStatus(svc[method](arg), [404, 400]);
    if (err.statusCode === 400 && err.errorCode !== 'ERR_UNSUPPORTED_OPERATION') {
      throw new Error(`unexpected 400: ${JSON.stringify(err)}`);
    }
  };
}

const domainPart = part => async (svc, obj) => {
  await deleted(() => svc[part](obj.id));
  const after = await svc.get(obj.id);
  const field = part === 'deleteCertificate' ? 'certificate' : 'certificateManagementPolicy';
  if (after[field] !== null && after[field] !== undefined) throw new Error(`${field} still set`);
};

const RECIPES = {
  apiKeys: crud(() => ({ description: 'compat' })),
  credentials: crud(() => ({ acl: ['bind:*.example.com'] })),
  sshCredentials: crud(() => ({ publicKey: sshKey(), acl: ['bind:*'] })),
  sshCertificateAuthorities: crud(() => ({ privateKeyType: 'ecdsa', description: 'compat' })),
  sshHostCertificates: crud(async () => ({
    sshCertificateAuthorityId: await helpers.sshCa(), publicKey: sshKey(),
    principals: ['host.example.com'] })),
  sshUserCertificates: crud(async () => ({
    sshCertificateAuthorityId: await helpers.sshCa(), publicKey: sshKey(), principals: ['v2'],
    extensions: { 'permit-port-forwarding': '' } })),
  botUsers: crud(() => ({ name: `bot-${rnd()}` }), () => ({ active: false })),
  abuseReports: crud(() => ({ urls: [`https://${rnd()}.example.com/x`] })),
  agentIngresses: crud(() => ({ domain: `connect-${rnd()}.example.com` })),
  reservedDomains: crud(() => ({ domain: `${rnd()}.customer-example.com` }), undefined, {
    deleteCertificate: domainPart('deleteCertificate'),
    deleteCertificateManagementPolicy: domainPart('deleteCertificateManagementPolicy'),
  }),
  ipPolicies: crud(() => ({})),
  ipPolicyRules: crud(async () => ({ cidr: '10.0.0.0/8', action: 'allow',
                                     ipPolicyId: await helpers.ipPolicy() }),
                      () => ({ cidr: '10.1.0.0/16' })),
  'backends.httpResponseBackends': crud(() => ({ body: 'ok', statusCode: 200 })),
  'edges.edgesTcp': crud(async () => ({ hostports: [await helpers.reservedAddr()],
                                  policy: { enabled: true, inbound: DENY, outbound: [] } }),
                         () => ({ metadata: 'm', policy: { inbound: DENY, outbound: [] } })),
  // a free name under the base domain (tunnels.localhost by default)
  'edges.edgesHttps': crud(() => ({ hostports: [`${rnd()}.${process.env.BASE_DOMAIN || 'tunnels.localhost'}:443`] })),
  'edges.edgesHttpsRoutes': routes(),
  'edgeModules.tcpEdgeBackendModule': module_('tcpEdge', async () => ({
    backendId: await helpers.backend() })),
  'edgeModules.tcpEdgeIpRestrictionModule': module_('tcpEdge', async () => ({
    ipPolicyIds: [await helpers.ipPolicy()] })),
  'edgeModules.edgeRouteUserAgentFilterModule': module_('httpsRoute', async () => ({
    allow: ['^curl'], deny: [] })),
  'edgeModules.edgeRouteResponseHeadersModule': module_('httpsRoute', async () => ({
    add: { 'x-a': '1' }, remove: ['server'] })),
  // ---- routed since the table was first written ----
  'backends.tunnelGroupBackends': crud(() => ({ labels: { edge: rnd() } })),
  'backends.failoverBackends': crud(async () => ({ backends: [await helpers.backend()] })),
  'backends.weightedBackends': crud(async () => ({
    backends: new Map([[await helpers.backend(), 1]]) })),
  reservedAddrs: crud(() => ({ description: 'compat' })),
  ipRestrictions: crud(async () => ({ type: 'endpoints', ipPolicyIds: [await helpers.ipPolicy()] }),
                       () => ({ enforced: true })),
  'backends.staticBackends': crud(() => ({ address: 'origin.example.com:443',
                                           tls: { enabled: true } }),
                                  () => ({ address: 'origin.example.com:8443' })),
  tunnelSessions: probe('ts'),
  tunnels: probe('tn'),
  // cloud endpoints (a free name under the base domain, a policy that answers) where the
  // client version has create; else (list/get only) agent endpoints are probed
  endpoints: (svc, method) => (typeof svc.create === 'function' ? crud(() => ({
    url: `https://${rnd()}.${process.env.BASE_DOMAIN || 'tunnels.localhost'}`, type: 'cloud',
    trafficPolicy: '{"on_http_request":[{"actions":[{"type":"deny"}]}]}' })) : probe('ep'))(
    svc, method),
  'edgeModules.edgeRouteBackendModule': module_('httpsRoute', async () => ({
    backendId: await helpers.backend() })),
  'edgeModules.edgeRouteIpRestrictionModule': module_('httpsRoute', async () => ({
    ipPolicyIds: [await helpers.ipPolicy()] })),
  'edgeModules.edgeRouteRequestHeadersModule': module_('httpsRoute', async () => ({
    add: { 'x-b': '2' }, remove: [] })),
  'edgeModules.edgeRouteCompressionModule': module_('httpsRoute', async () => ({ enabled: true })),
  'edgeModules.edgeRouteCircuitBreakerModule': module_('httpsRoute', async () => ({
    enabled: true, errorThresholdPercentage: 0.5 })),
  'edgeModules.edgeRouteWebsocketTcpConverterModule': module_('httpsRoute', async () => ({
    enabled: true })),
  'edgeModules.edgeRouteWebhookVerificationModule': module_('httpsRoute', async () => ({
    provider: 'SLACK', secret: 's3cret' })),
  'edgeModules.edgeRouteOAuthModule': module_('httpsRoute', async () => ({
    provider: { google: { clientId: 'compat-id', clientSecret: 'compat-secret',
                          emailDomains: ['example.com'] } } })),
  'edgeModules.edgeRouteOidcModule': module_('httpsRoute', async () => ({
    issuer: 'https://issuer.example.com', clientId: 'compat-id', clientSecret: 'compat-secret',
    scopes: ['openid'] })),
  // no SAML identity provider here: a replace is refused by name (ERR_NGROK_7021)
  'edgeModules.edgeRouteSamlModule': async (svc, method) => {
    const route = await helpers.httpsRoute();
    if (method === 'replace') {
      const err = await expectStatus(svc.replace({ ...route, module: {
        idpMetadata: '<EntityDescriptor/>' } }), [400]);
      if (err.errorCode !== 'ERR_NGROK_7021') throw new Error(`unexpected: ${JSON.stringify(err)}`);
      return;
    }
    if (method === 'get') { await expectStatus(svc.get(route), [404]); return; }
    if (method === 'delete') return deleted(() => svc.delete(route));
    throw new Error(`no recipe for ${method}`);
  },
  'edgeModules.httpsEdgeTlsTerminationModule': module_('httpsEdge', async () => ({
    minVersion: '1.2' })),
  'edgeModules.httpsEdgeMutualTlsModule': module_('httpsEdge', async () => ({
    certificateAuthorityIds: [await helpers.ca()] })),
  // a free name under the base domain, terminated at the edge with mutual TLS
  'edges.edgesTls': crud(async () => ({
    hostports: [`${rnd()}.${process.env.BASE_DOMAIN || 'tunnels.localhost'}:443`],
    tlsTermination: { terminateAt: 'edge', minVersion: '1.2' },
    mutualTls: { certificateAuthorityIds: [await helpers.ca()] },
    policy: { enabled: true, inbound: DENY, outbound: [] } })),
  'edgeModules.tlsEdgeBackendModule': module_('tlsEdge', async () => ({
    backendId: await helpers.backend() })),
  'edgeModules.tlsEdgeIpRestrictionModule': module_('tlsEdge', async () => ({
    ipPolicyIds: [await helpers.ipPolicy()] })),
  'edgeModules.tlsEdgeMutualTlsModule': module_('terminatingTlsEdge', async () => ({
    certificateAuthorityIds: [await helpers.ca()] })),
  'edgeModules.tlsEdgeTlsTerminationModule': module_('tlsEdge', async () => ({
    terminateAt: 'upstream' })),
};

(async () => {
  const results = [];
  for (const entry of config.services) {
    const svc = service(entry.name);
    for (const method of methods(svc)) {
      const result = { service: entry.name, method };
      if (entry.routed[method] === false) {
        results.push({ ...result, status: 'skip', detail: 'route not in the app yet' });
        continue;
      }
      const recipe = RECIPES[entry.name];
      if (!recipe) {
        results.push({ ...result, status: 'fail', detail: 'no recipe for this service' });
        continue;
      }
      try {
        await recipe(svc, method);
        results.push({ ...result, status: 'pass' });
      } catch (err) {
        const detail = err instanceof Error ? err.message : JSON.stringify(err);
        results.push({ ...result, status: 'fail', detail });
      }
    }
  }
  process.stdout.write(JSON.stringify(results));
})().catch(err => { console.error(err); process.exit(2); });
