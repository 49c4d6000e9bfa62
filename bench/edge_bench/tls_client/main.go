// tls_client: the load generator of bench_peers.py's mutual TLS case, which wrk cannot be (it
// presents no client certificate). `-c` goroutines each open a new TLS connection per request
// (no session resumed), present the client certificate, send one GET with Connection: close,
// read the answer to its end, for `-d` seconds; then one JSON line: requests (answered 200),
// errors, requests a second, p50 and p99 in microseconds.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "", "host:port to connect to")
	sni := flag.String("sni", "", "the TLS server name")
	host := flag.String("host", "", "the Host header (default: the server name)")
	path := flag.String("path", "/echo", "the request's target")
	cert := flag.String("cert", "", "the client certificate (PEM)")
	key := flag.String("key", "", "its key (PEM)")
	conns := flag.Int("c", 20, "connections at a time")
	seconds := flag.Float64("d", 5, "seconds")
	flag.Parse()
	if *host == "" {
		*host = *sni
	}
	config := &tls.Config{
		ServerName:         *sni,
		InsecureSkipVerify: true, // the server's chain is not what is measured
		NextProtos:         []string{"http/1.1"},
	}
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	request := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", *path, *host))
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errors    int
		wg        sync.WaitGroup
	)
	started := time.Now()
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				ok := once(*addr, config, request)
				took := time.Since(t0)
				mu.Lock()
				if ok {
					latencies = append(latencies, took)
				} else {
					errors++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started).Seconds()
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	at := func(q float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[int(q*float64(len(latencies)-1))].Microseconds())
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"requests": len(latencies),
		"errors":   errors,
		"rps":      float64(len(latencies)) / elapsed,
		"p50_us":   at(0.50),
		"p99_us":   at(0.99),
	})
}

// once: one connection, one request, its answer read to the end; whether it was a 200.
func once(addr string, config *tls.Config, request []byte) bool {
	raw, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return false
	}
	conn := tls.Client(raw, config)
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(request); err != nil {
		return false
	}
	answer, err := io.ReadAll(conn)
	if err != nil && len(answer) == 0 {
		return false
	}
	return bytes.HasPrefix(answer, []byte("HTTP/1.1 200"))
}
