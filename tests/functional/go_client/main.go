// The official Go API client (github.com/ngrok/ngrok-api-go/v7) as a process the tests drive:
// tests/functional/test_go_client_compat.py runs the Python client's recipes through it, one
// call at a time, so the Go client is held to the same report as the Python and TypeScript
// clients (docs/TESTING.md "Client compatibility").
//
//	compat <base URL> <API key>
//
// stdin, one JSON line a call: {"service": "edges/https_routes", "method": "Get",
// "first": <the call's first argument>, "named": {<every argument by its API field name>}};
// or {"methods": true} for every service's exported methods.
// stdout, one JSON line an answer: {"result": <the method's result as JSON>} (a list for an
// iterator, which is read to its end), {"error": {"status_code", "error_code", "msg"}} for the
// API's error, {"failure": "..."} for a call that could not be made.
//
// A method's arguments after the context are made from the call by their type: a string is
// the first argument (an id, a subscription id), a *ngrok.Paging or any other struct pointer
// is the named arguments as JSON (the client's json tags are the API's field names).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"time"

	"github.com/ngrok/ngrok-api-go/v7"
	abuse_reports "github.com/ngrok/ngrok-api-go/v7/abuse_reports"
	agent_ingresses "github.com/ngrok/ngrok-api-go/v7/agent_ingresses"
	api_keys "github.com/ngrok/ngrok-api-go/v7/api_keys"
	application_sessions "github.com/ngrok/ngrok-api-go/v7/application_sessions"
	application_users "github.com/ngrok/ngrok-api-go/v7/application_users"
	backends_failover "github.com/ngrok/ngrok-api-go/v7/backends/failover"
	backends_http_response "github.com/ngrok/ngrok-api-go/v7/backends/http_response"
	backends_static_address "github.com/ngrok/ngrok-api-go/v7/backends/static_address"
	backends_tunnel_group "github.com/ngrok/ngrok-api-go/v7/backends/tunnel_group"
	backends_weighted "github.com/ngrok/ngrok-api-go/v7/backends/weighted"
	bot_users "github.com/ngrok/ngrok-api-go/v7/bot_users"
	certificate_authorities "github.com/ngrok/ngrok-api-go/v7/certificate_authorities"
	credentials "github.com/ngrok/ngrok-api-go/v7/credentials"
	edge_modules_https_edge_mutual_tls "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_mutual_tls"
	edge_modules_https_edge_route_backend "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_backend"
	edge_modules_https_edge_route_circuit_breaker "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_circuit_breaker"
	edge_modules_https_edge_route_compression "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_compression"
	edge_modules_https_edge_route_ip_restriction "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_ip_restriction"
	edge_modules_https_edge_route_oauth "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_oauth"
	edge_modules_https_edge_route_oidc "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_oidc"
	edge_modules_https_edge_route_request_headers "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_request_headers"
	edge_modules_https_edge_route_response_headers "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_response_headers"
	edge_modules_https_edge_route_saml "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_saml"
	edge_modules_https_edge_route_traffic_policy "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_traffic_policy"
	edge_modules_https_edge_route_user_agent_filter "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_user_agent_filter"
	edge_modules_https_edge_route_webhook_verification "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_webhook_verification"
	edge_modules_https_edge_route_websocket_tcp_converter "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_route_websocket_tcp_converter"
	edge_modules_https_edge_tls_termination "github.com/ngrok/ngrok-api-go/v7/edge_modules/https_edge_tls_termination"
	edge_modules_tcp_edge_backend "github.com/ngrok/ngrok-api-go/v7/edge_modules/tcp_edge_backend"
	edge_modules_tcp_edge_ip_restriction "github.com/ngrok/ngrok-api-go/v7/edge_modules/tcp_edge_ip_restriction"
	edge_modules_tcp_edge_traffic_policy "github.com/ngrok/ngrok-api-go/v7/edge_modules/tcp_edge_traffic_policy"
	edge_modules_tls_edge_backend "github.com/ngrok/ngrok-api-go/v7/edge_modules/tls_edge_backend"
	edge_modules_tls_edge_ip_restriction "github.com/ngrok/ngrok-api-go/v7/edge_modules/tls_edge_ip_restriction"
	edge_modules_tls_edge_mutual_tls "github.com/ngrok/ngrok-api-go/v7/edge_modules/tls_edge_mutual_tls"
	edge_modules_tls_edge_tls_termination "github.com/ngrok/ngrok-api-go/v7/edge_modules/tls_edge_tls_termination"
	edge_modules_tls_edge_traffic_policy "github.com/ngrok/ngrok-api-go/v7/edge_modules/tls_edge_traffic_policy"
	edges_https "github.com/ngrok/ngrok-api-go/v7/edges/https"
	edges_https_routes "github.com/ngrok/ngrok-api-go/v7/edges/https_routes"
	edges_tcp "github.com/ngrok/ngrok-api-go/v7/edges/tcp"
	edges_tls "github.com/ngrok/ngrok-api-go/v7/edges/tls"
	endpoints "github.com/ngrok/ngrok-api-go/v7/endpoints"
	event_destinations "github.com/ngrok/ngrok-api-go/v7/event_destinations"
	event_sources "github.com/ngrok/ngrok-api-go/v7/event_sources"
	event_subscriptions "github.com/ngrok/ngrok-api-go/v7/event_subscriptions"
	ip_policies "github.com/ngrok/ngrok-api-go/v7/ip_policies"
	ip_policy_rules "github.com/ngrok/ngrok-api-go/v7/ip_policy_rules"
	ip_restrictions "github.com/ngrok/ngrok-api-go/v7/ip_restrictions"
	kubernetes_operators "github.com/ngrok/ngrok-api-go/v7/kubernetes_operators"
	reserved_addrs "github.com/ngrok/ngrok-api-go/v7/reserved_addrs"
	reserved_domains "github.com/ngrok/ngrok-api-go/v7/reserved_domains"
	secrets "github.com/ngrok/ngrok-api-go/v7/secrets"
	ssh_certificate_authorities "github.com/ngrok/ngrok-api-go/v7/ssh_certificate_authorities"
	ssh_credentials "github.com/ngrok/ngrok-api-go/v7/ssh_credentials"
	ssh_host_certificates "github.com/ngrok/ngrok-api-go/v7/ssh_host_certificates"
	ssh_user_certificates "github.com/ngrok/ngrok-api-go/v7/ssh_user_certificates"
	tls_certificates "github.com/ngrok/ngrok-api-go/v7/tls_certificates"
	tunnel_sessions "github.com/ngrok/ngrok-api-go/v7/tunnel_sessions"
	tunnels "github.com/ngrok/ngrok-api-go/v7/tunnels"
	vaults "github.com/ngrok/ngrok-api-go/v7/vaults"
)

type call struct {
	Service string          `json:"service"`
	Method  string          `json:"method"`
	First   json.RawMessage `json:"first"`
	Named   json.RawMessage `json:"named"`
	Methods bool            `json:"methods"`
}

var contextType = reflect.TypeOf((*context.Context)(nil)).Elem()

func services(cfg *ngrok.ClientConfig) map[string]any {
	return map[string]any{
		"abuse_reports":                                         abuse_reports.NewClient(cfg),
		"agent_ingresses":                                       agent_ingresses.NewClient(cfg),
		"api_keys":                                              api_keys.NewClient(cfg),
		"application_sessions":                                  application_sessions.NewClient(cfg),
		"application_users":                                     application_users.NewClient(cfg),
		"backends/failover":                                     backends_failover.NewClient(cfg),
		"backends/http_response":                                backends_http_response.NewClient(cfg),
		"backends/static_address":                               backends_static_address.NewClient(cfg),
		"backends/tunnel_group":                                 backends_tunnel_group.NewClient(cfg),
		"backends/weighted":                                     backends_weighted.NewClient(cfg),
		"bot_users":                                             bot_users.NewClient(cfg),
		"certificate_authorities":                               certificate_authorities.NewClient(cfg),
		"credentials":                                           credentials.NewClient(cfg),
		"edge_modules/https_edge_mutual_tls":                    edge_modules_https_edge_mutual_tls.NewClient(cfg),
		"edge_modules/https_edge_route_backend":                 edge_modules_https_edge_route_backend.NewClient(cfg),
		"edge_modules/https_edge_route_circuit_breaker":         edge_modules_https_edge_route_circuit_breaker.NewClient(cfg),
		"edge_modules/https_edge_route_compression":             edge_modules_https_edge_route_compression.NewClient(cfg),
		"edge_modules/https_edge_route_ip_restriction":          edge_modules_https_edge_route_ip_restriction.NewClient(cfg),
		"edge_modules/https_edge_route_oauth":                   edge_modules_https_edge_route_oauth.NewClient(cfg),
		"edge_modules/https_edge_route_oidc":                    edge_modules_https_edge_route_oidc.NewClient(cfg),
		"edge_modules/https_edge_route_request_headers":         edge_modules_https_edge_route_request_headers.NewClient(cfg),
		"edge_modules/https_edge_route_response_headers":        edge_modules_https_edge_route_response_headers.NewClient(cfg),
		"edge_modules/https_edge_route_saml":                    edge_modules_https_edge_route_saml.NewClient(cfg),
		"edge_modules/https_edge_route_traffic_policy":          edge_modules_https_edge_route_traffic_policy.NewClient(cfg),
		"edge_modules/https_edge_route_user_agent_filter":       edge_modules_https_edge_route_user_agent_filter.NewClient(cfg),
		"edge_modules/https_edge_route_webhook_verification":    edge_modules_https_edge_route_webhook_verification.NewClient(cfg),
		"edge_modules/https_edge_route_websocket_tcp_converter": edge_modules_https_edge_route_websocket_tcp_converter.NewClient(cfg),
		"edge_modules/https_edge_tls_termination":               edge_modules_https_edge_tls_termination.NewClient(cfg),
		"edge_modules/tcp_edge_backend":                         edge_modules_tcp_edge_backend.NewClient(cfg),
		"edge_modules/tcp_edge_ip_restriction":                  edge_modules_tcp_edge_ip_restriction.NewClient(cfg),
		"edge_modules/tcp_edge_traffic_policy":                  edge_modules_tcp_edge_traffic_policy.NewClient(cfg),
		"edge_modules/tls_edge_backend":                         edge_modules_tls_edge_backend.NewClient(cfg),
		"edge_modules/tls_edge_ip_restriction":                  edge_modules_tls_edge_ip_restriction.NewClient(cfg),
		"edge_modules/tls_edge_mutual_tls":                      edge_modules_tls_edge_mutual_tls.NewClient(cfg),
		"edge_modules/tls_edge_tls_termination":                 edge_modules_tls_edge_tls_termination.NewClient(cfg),
		"edge_modules/tls_edge_traffic_policy":                  edge_modules_tls_edge_traffic_policy.NewClient(cfg),
		"edges/https":                                           edges_https.NewClient(cfg),
		"edges/https_routes":                                    edges_https_routes.NewClient(cfg),
		"edges/tcp":                                             edges_tcp.NewClient(cfg),
		"edges/tls":                                             edges_tls.NewClient(cfg),
		"endpoints":                                             endpoints.NewClient(cfg),
		"event_destinations":                                    event_destinations.NewClient(cfg),
		"event_sources":                                         event_sources.NewClient(cfg),
		"event_subscriptions":                                   event_subscriptions.NewClient(cfg),
		"ip_policies":                                           ip_policies.NewClient(cfg),
		"ip_policy_rules":                                       ip_policy_rules.NewClient(cfg),
		"ip_restrictions":                                       ip_restrictions.NewClient(cfg),
		"kubernetes_operators":                                  kubernetes_operators.NewClient(cfg),
		"reserved_addrs":                                        reserved_addrs.NewClient(cfg),
		"reserved_domains":                                      reserved_domains.NewClient(cfg),
		"secrets":                                               secrets.NewClient(cfg),
		"ssh_certificate_authorities":                           ssh_certificate_authorities.NewClient(cfg),
		"ssh_credentials":                                       ssh_credentials.NewClient(cfg),
		"ssh_host_certificates":                                 ssh_host_certificates.NewClient(cfg),
		"ssh_user_certificates":                                 ssh_user_certificates.NewClient(cfg),
		"tls_certificates":                                      tls_certificates.NewClient(cfg),
		"tunnel_sessions":                                       tunnel_sessions.NewClient(cfg),
		"tunnels":                                               tunnels.NewClient(cfg),
		"vaults":                                                vaults.NewClient(cfg)}
}

func methodNames(svc any) []string {
	t := reflect.TypeOf(svc)
	names := make([]string, 0, t.NumMethod())
	for i := 0; i < t.NumMethod(); i++ {
		names = append(names, t.Method(i).Name)
	}
	sort.Strings(names)
	return names
}

// argument makes the value of a parameter of type t from the call.
func argument(t reflect.Type, c call) (reflect.Value, error) {
	switch {
	case t.Kind() == reflect.String:
		var s string
		if err := json.Unmarshal(c.First, &s); err != nil {
			return reflect.Value{}, fmt.Errorf("the first argument is not a string: %s", c.First)
		}
		return reflect.ValueOf(s).Convert(t), nil
	case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		v := reflect.New(t.Elem())
		named := c.Named
		if len(named) == 0 {
			named = json.RawMessage("{}")
		}
		if err := json.Unmarshal(named, v.Interface()); err != nil {
			return reflect.Value{}, fmt.Errorf("the arguments do not fit %s: %v", t.Elem(), err)
		}
		return v, nil
	}
	return reflect.Value{}, fmt.Errorf("no way to make a %s argument", t)
}

func run(svcs map[string]any, c call) map[string]any {
	svc, ok := svcs[c.Service]
	if !ok {
		return map[string]any{"failure": "no such service: " + c.Service}
	}
	m := reflect.ValueOf(svc).MethodByName(c.Method)
	if !m.IsValid() {
		return map[string]any{"failure": "no such method: " + c.Method}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []reflect.Value{}
	for i := 0; i < m.Type().NumIn(); i++ {
		t := m.Type().In(i)
		if t == contextType {
			args = append(args, reflect.ValueOf(ctx))
			continue
		}
		v, err := argument(t, c)
		if err != nil {
			return map[string]any{"failure": err.Error()}
		}
		args = append(args, v)
	}
	out := m.Call(args)
	var result any
	var err error
	for _, v := range out {
		if v.Type().Implements(reflect.TypeOf((*error)(nil)).Elem()) {
			if !v.IsNil() {
				err = v.Interface().(error)
			}
		} else if v.Type().Kind() == reflect.Interface && v.MethodByName("Next").IsValid() {
			result, err = drain(ctx, v)
		} else {
			result = v.Interface()
		}
	}
	var apiErr *ngrok.Error
	if errors.As(err, &apiErr) {
		return map[string]any{"error": apiErr}
	}
	if err != nil {
		return map[string]any{"failure": err.Error()}
	}
	return map[string]any{"result": result}
}

// drain reads an ngrok.Iter to its end (the client asks for the next page itself).
func drain(ctx context.Context, it reflect.Value) ([]any, error) {
	items := []any{}
	for it.MethodByName("Next").Call([]reflect.Value{reflect.ValueOf(ctx)})[0].Bool() {
		items = append(items, it.MethodByName("Item").Call(nil)[0].Interface())
	}
	if e := it.MethodByName("Err").Call(nil)[0]; !e.IsNil() {
		return items, e.Interface().(error)
	}
	return items, nil
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: compat <base URL> <API key>")
		os.Exit(2)
	}
	svcs := services(ngrok.NewClientConfig(os.Args[2], ngrok.WithBaseURL(os.Args[1])))
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c call
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			_ = out.Encode(map[string]any{"failure": "not a call: " + err.Error()})
			continue
		}
		if c.Methods {
			listed := map[string][]string{}
			for name, svc := range svcs {
				listed[name] = methodNames(svc)
			}
			_ = out.Encode(map[string]any{"result": listed})
			continue
		}
		_ = out.Encode(run(svcs, c))
	}
}
