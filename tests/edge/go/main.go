// An agent program on the official Go SDK (golang.ngrok.com/ngrok/v2), run as a process by the
// edge tests (stacks.agents.GoAgent; `make test-deps` builds it into tests/edge/go/agent).
//
// Config: JSON in argv[1] (or in GO_AGENT_CONFIG when there is no argument):
//
//	authtoken, server_addr, root_cas (a PEM file),
//	endpoints: [{url?, traffic_policy?, pooling?, bindings?, metadata?, description?, name?,
//	             proxy_proto? ("v1"|"v2": the upstream's PROXY protocol), upstream? (a URL to
//	             forward to; default: the HTTP echo for http(s), the TCP echo for tcp and tls),
//	             agent_tls? (tls: the agent terminates TLS itself with a certificate of its own
//	             for the URL's host), listen? (Agent.Listen instead of Forward: the program
//	             accepts and relays to the HTTP upstream; a failed Accept is printed)}],
//	connect_timeout? (seconds, default 20), retry_refused? (keep retrying a refused Auth, as
//	the SDK does by itself; default: stop at the first refusal), log_level? ("debug"...),
//	label? (answered by the HTTP upstream as "agent": tells pooled agents apart),
//	connect_to? ("host:port": the SDK's connections go there whatever server_addr's host
//	resolves to, as curl's --resolve: TLS still names and verifies server_addr's host).
//
// It serves a small HTTP upstream (every request answered with JSON: sdk "go", agent, method,
// path, host, headers, body) and a TCP echo on 127.0.0.1, and prints one JSON line per event:
// {"event":"connected"}, {"event":"disconnected","error"}, {"event":"bound","url","id",
// "tunnel_id","session_id"} per endpoint, {"event":"endpoint_done","index","url"} when an
// endpoint's forwarder ends (EndpointForwarder.Done: the edge's StopTunnel, or the exit), {"event":"error","stage":"connect"|"bind"|...,
// "args":[err.Error()],"code":"ERR_NGROK_..."} (the error as the SDK returns it), then
// {"event":"ready"}. Lines on stdin: "srvinfo" (Diagnose: the SrvInfo RPC, printed as
// {"event":"srvinfo","region"}), "update <index> <json>" (EndpointForwarder.Update: the
// PatchTunnelState RPC; json {name?, description?, metadata?, pooling?, traffic_policy?}),
// "exit" (or stdin's end) disconnects and ends the program.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.ngrok.com/ngrok/v2"
)

type endpointConfig struct {
	URL           string   `json:"url"`
	TrafficPolicy string   `json:"traffic_policy"`
	Pooling       bool     `json:"pooling"`
	Bindings      []string `json:"bindings"`
	Metadata      string   `json:"metadata"`
	Description   string   `json:"description"`
	Name          string   `json:"name"`
	ProxyProto    string   `json:"proxy_proto"`
	Upstream      string   `json:"upstream"`
	AgentTLS      bool     `json:"agent_tls"`
	Listen        bool     `json:"listen"`
}

type config struct {
	Authtoken      string           `json:"authtoken"`
	ServerAddr     string           `json:"server_addr"`
	RootCAs        string           `json:"root_cas"`
	Endpoints      []endpointConfig `json:"endpoints"`
	ConnectTimeout float64          `json:"connect_timeout"`
	RetryRefused   bool             `json:"retry_refused"`
	LogLevel       string           `json:"log_level"`
	Label          string           `json:"label"`
	ConnectTo      string           `json:"connect_to"`
}

// resolveTo dials one address whatever address it is asked for (the config's connect_to).
type resolveTo struct{ addr string }

func (r resolveTo) Dial(network, _ string) (net.Conn, error) {
	return net.Dial(network, r.addr)
}

func (r resolveTo) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var dialer net.Dialer
	return dialer.DialContext(ctx, network, r.addr)
}

type patch struct {
	Name          *string `json:"name"`
	Description   *string `json:"description"`
	Metadata      *string `json:"metadata"`
	Pooling       *bool   `json:"pooling"`
	TrafficPolicy *string `json:"traffic_policy"`
}

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func emit(event map[string]any) {
	out.Lock()
	defer out.Unlock()
	_ = out.enc.Encode(event)
}

// failure prints an error as the SDK returned it: its text, and its ngrok code when it has one.
func failure(stage string, err error, more map[string]any) {
	event := map[string]any{"event": "error", "stage": stage, "args": []string{err.Error()}}
	var coded ngrok.Error
	var legacyCoded interface{ ErrorCode() string } // what Update returns: not wrapped
	if errors.As(err, &coded) {
		event["code"] = coded.Code()
	} else if errors.As(err, &legacyCoded) {
		event["code"] = legacyCoded.ErrorCode()
	}
	for k, v := range more {
		event[k] = v
	}
	emit(event)
}

func main() {
	raw := os.Getenv("GO_AGENT_CONFIG")
	if len(os.Args) > 1 {
		raw = os.Args[1]
	}
	var cfg config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		failure("config", err, nil)
		os.Exit(2)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 20
	}
	httpAddr, tcpAddr := serveUpstreams(cfg.Label)

	opts := []ngrok.AgentOption{
		ngrok.WithAuthtoken(cfg.Authtoken),
		ngrok.WithAgentConnectURL(cfg.ServerAddr),
		ngrok.WithLogger(logger(cfg.LogLevel)),
	}
	if cfg.ConnectTo != "" {
		opts = append(opts, ngrok.WithDialer(resolveTo{cfg.ConnectTo}))
	}
	if cfg.RootCAs != "" {
		pem, err := os.ReadFile(cfg.RootCAs)
		if err != nil {
			failure("config", err, nil)
			os.Exit(2)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		opts = append(opts, ngrok.WithAgentConnectCAs(pool))
	}

	// The context given to Connect is the session's for its whole life (the SDK closes the
	// session when it ends): the connect timeout cancels it only while not yet connected.
	ctx, cancel := context.WithCancel(context.Background())
	var connecting sync.Mutex
	connected := false
	opts = append(opts, ngrok.WithEventHandler(func(e ngrok.Event) {
		switch ev := e.(type) {
		case *ngrok.EventAgentConnectSucceeded:
			connecting.Lock()
			connected = true
			connecting.Unlock()
			emit(map[string]any{"event": "connected"})
		case *ngrok.EventAgentDisconnected:
			text := ""
			if ev.Error != nil {
				text = ev.Error.Error()
			}
			emit(map[string]any{"event": "disconnected", "error": text})
			// The SDK retries a refused Auth by itself (back-off 0.5 s to 30 s) until the
			// context given to Connect ends; this program stops at the first refusal (one
			// carrying an ngrok code) unless told to retry.
			connecting.Lock()
			first := !connected
			connecting.Unlock()
			if first && !cfg.RetryRefused && ev.Error != nil && strings.Contains(text, "ERR_NGROK_") {
				cancel()
			}
		}
	}))

	agent, err := ngrok.NewAgent(opts...)
	if err != nil {
		failure("connect", err, nil)
		os.Exit(1)
	}
	timer := time.AfterFunc(time.Duration(cfg.ConnectTimeout*float64(time.Second)), func() {
		connecting.Lock()
		defer connecting.Unlock()
		if !connected {
			cancel()
		}
	})
	if err := agent.Connect(ctx); err != nil {
		failure("connect", err, nil)
		emit(map[string]any{"event": "ready"})
		waitStdin(nil, nil)
		return
	}
	timer.Stop()

	sessionID := ""
	if sess, err := agent.Session(); err == nil {
		sessionID = sess.ID()
	}
	forwarders := make([]ngrok.EndpointForwarder, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		if ep.Listen {
			listenAndRelay(agent, ep, i, sessionID, httpAddr)
			continue
		}
		fwd, err := forward(agent, ep, httpAddr, tcpAddr)
		if err != nil {
			failure("bind", err, map[string]any{"index": i})
			continue
		}
		forwarders[i] = fwd
		emit(map[string]any{
			"event":      "bound",
			"index":      i,
			"url":        fwd.URL().String(),
			"id":         fwd.ID(),
			"tunnel_id":  fwd.TunnelID(),
			"session_id": sessionID,
		})
		go func(i int, fwd ngrok.EndpointForwarder) { // the endpoint closed: by the program's
			<-fwd.Done() // end, or by the edge (a StopTunnel closes this one listener)
			emit(map[string]any{"event": "endpoint_done", "index": i, "url": fwd.URL().String()})
		}(i, fwd)
	}
	emit(map[string]any{"event": "ready"})
	waitStdin(agent, forwarders)
}

// listenAndRelay binds an endpoint with Agent.Listen (no forwarder: the program accepts its
// connections itself and relays each to the HTTP upstream); when Accept fails (the edge's
// StopTunnel closes the listener) it prints the error as the SDK returned it, stage "accept".
func listenAndRelay(agent ngrok.Agent, ep endpointConfig, i int, sessionID, httpAddr string) {
	var epOpts []ngrok.EndpointOption
	if ep.URL != "" {
		epOpts = append(epOpts, ngrok.WithURL(ep.URL))
	}
	listener, err := agent.Listen(context.Background(), epOpts...)
	if err != nil {
		failure("bind", err, map[string]any{"index": i})
		return
	}
	emit(map[string]any{
		"event":      "bound",
		"index":      i,
		"url":        listener.URL().String(),
		"id":         listener.ID(),
		"session_id": sessionID,
	})
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				failure("accept", err, map[string]any{"index": i, "url": listener.URL().String()})
				return
			}
			go func() {
				defer conn.Close()
				upstream, err := net.Dial("tcp", httpAddr)
				if err != nil {
					return
				}
				defer upstream.Close()
				go func() {
					_, _ = io.Copy(upstream, conn)
					if tcp, ok := upstream.(*net.TCPConn); ok {
						_ = tcp.CloseWrite() // the edge's FIN: the upstream closes after answering
					}
				}()
				_, _ = io.Copy(conn, upstream)
			}()
		}
	}()
}

func forward(agent ngrok.Agent, ep endpointConfig, httpAddr, tcpAddr string) (ngrok.EndpointForwarder, error) {
	scheme := "https"
	host := ""
	if ep.URL != "" {
		if u, err := url.Parse(ep.URL); err == nil && u.Scheme != "" {
			scheme, host = u.Scheme, u.Hostname()
		}
	}
	target := ep.Upstream
	if target == "" {
		if scheme == "http" || scheme == "https" {
			target = "http://" + httpAddr
		} else {
			target = "tcp://" + tcpAddr
		}
	}
	var upOpts []ngrok.UpstreamOption
	if ep.ProxyProto != "" {
		upOpts = append(upOpts, ngrok.WithUpstreamProxyProto(ngrok.ProxyProtoVersion(ep.ProxyProto)))
	}
	var epOpts []ngrok.EndpointOption
	if ep.URL != "" {
		epOpts = append(epOpts, ngrok.WithURL(ep.URL))
	}
	if ep.TrafficPolicy != "" {
		epOpts = append(epOpts, ngrok.WithTrafficPolicy(ep.TrafficPolicy))
	}
	if ep.Pooling {
		epOpts = append(epOpts, ngrok.WithPoolingEnabled(true))
	}
	if len(ep.Bindings) > 0 {
		epOpts = append(epOpts, ngrok.WithBindings(ep.Bindings...))
	}
	if ep.Metadata != "" {
		epOpts = append(epOpts, ngrok.WithMetadata(ep.Metadata))
	}
	if ep.Description != "" {
		epOpts = append(epOpts, ngrok.WithDescription(ep.Description))
	}
	if ep.Name != "" {
		epOpts = append(epOpts, ngrok.WithName(ep.Name))
	}
	if ep.AgentTLS {
		tlsCfg, err := selfSigned(host)
		if err != nil {
			return nil, err
		}
		epOpts = append(epOpts, ngrok.WithAgentTLSTermination(tlsCfg))
	}
	return agent.Forward(context.Background(), ngrok.WithUpstream(target, upOpts...), epOpts...)
}

func waitStdin(agent ngrok.Agent, forwarders []ngrok.EndpointForwarder) {
	lines := bufio.NewScanner(os.Stdin)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		command, rest, _ := strings.Cut(line, " ")
		switch {
		case command == "exit":
			finish(agent)
			return
		case command == "srvinfo" && agent != nil:
			srvInfo(agent)
		case command == "update" && agent != nil:
			update(forwarders, rest)
		case command != "":
			emit(map[string]any{"event": "error", "stage": "command", "args": []string{"unknown command: " + line}})
		}
	}
	finish(agent)
}

func finish(agent ngrok.Agent) {
	if agent != nil {
		_ = agent.Disconnect()
	}
	os.Exit(0)
}

func srvInfo(agent ngrok.Agent) {
	diagnoser, ok := agent.(ngrok.Diagnoser)
	if !ok {
		emit(map[string]any{"event": "error", "stage": "srvinfo", "args": []string{"the agent is no Diagnoser"}})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	result, err := diagnoser.Diagnose(ctx, "")
	if err != nil {
		failure("srvinfo", err, nil)
		return
	}
	emit(map[string]any{"event": "srvinfo", "region": result.Region, "addr": result.Addr})
}

func update(forwarders []ngrok.EndpointForwarder, rest string) {
	index, body, _ := strings.Cut(rest, " ")
	i, err := strconv.Atoi(index)
	if err != nil || i < 0 || i >= len(forwarders) || forwarders[i] == nil {
		emit(map[string]any{"event": "error", "stage": "update", "args": []string{"no endpoint " + index}})
		return
	}
	var p patch
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		failure("update", err, nil)
		return
	}
	updatable, ok := forwarders[i].(ngrok.UpdateableEndpointForwarder)
	if !ok {
		emit(map[string]any{"event": "error", "stage": "update", "args": []string{"the endpoint cannot be updated"}})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := updatable.Update(ctx, p.Name, p.Description, p.Metadata, p.Pooling, p.TrafficPolicy); err != nil {
		failure("update", err, map[string]any{"index": i})
		return
	}
	emit(map[string]any{"event": "updated", "index": i})
}

func logger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil || level == "" {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// serveUpstreams starts the HTTP echo and the TCP echo on the loopback; their addresses.
func serveUpstreams(label string) (string, string) {
	httpListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		_ = http.Serve(httpListener, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			headers := map[string]string{}
			for k, v := range r.Header {
				headers[k] = strings.Join(v, ", ")
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"sdk": "go", "agent": label, "method": r.Method, "path": r.URL.RequestURI(), "host": r.Host,
				"headers": headers, "body": string(body),
			})
		}))
	}()
	tcpListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() {
		for {
			conn, err := tcpListener.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_, _ = io.Copy(conn, conn)
			}()
		}
	}()
	return httpListener.Addr().String(), tcpListener.Addr().String()
}

// selfSigned is a TLS server config with a new self-signed certificate for host (CN
// "go-agent": a client can tell the agent's certificate from the edge's).
func selfSigned(host string) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "go-agent"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{host},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, nil
}
