// An agent program on the official JavaScript SDK (@ngrok/ngrok), run by stacks.agents.NodeAgent.
// argv[2]: JSON {authtoken, server_addr, root_cas, domain?, traffic_policy?, pooling_enabled?,
// name? (answered as `agent`), options? (more forward() options)}. Prints one JSON line
// ({url} or {error, code}), then {status} whenever the session is lost ('closed') or back
// ('connected'), and serves until stdin closes.
const ngrok = require('@ngrok/ngrok');
const http = require('http');
const cfg = JSON.parse(process.argv[2]);
const server = http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ sdk: 'node', agent: cfg.name, path: req.url, headers: req.headers }));
}).listen(0, '127.0.0.1', async () => {
  try {
    const listener = cfg.pooling_enabled ? await pooled(`127.0.0.1:${server.address().port}`)
      : await ngrok.forward({
      addr: `127.0.0.1:${server.address().port}`, authtoken: cfg.authtoken,
      server_addr: cfg.server_addr, root_cas: cfg.root_cas,
      domain: cfg.domain, traffic_policy: cfg.traffic_policy,
      onStatusChange: (status) => console.log(JSON.stringify({ status })),
      ...(cfg.options || {}),   // any other forward() option (oidc_issuer_url, ...)
    });
    console.log(JSON.stringify({ url: listener.url() }));
  } catch (e) {
    console.log(JSON.stringify({ error: e.message, code: e.errorCode || null }));
  }
});
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();

// forward()'s pooling_enabled is not sent by this SDK version: the listener builder's is
async function pooled(addr) {
  const session = await new ngrok.SessionBuilder().authtoken(cfg.authtoken)
    .serverAddr(cfg.server_addr).rootCas(cfg.root_cas)
    .connect();
  const builder = session.httpEndpoint().domain(cfg.domain).poolingEnabled(true);
  if (cfg.traffic_policy) builder.trafficPolicy(cfg.traffic_policy);
  const listener = await builder.listen();
  listener.forward(addr);   // resolves when forwarding ends: not awaited
  return listener;
}
