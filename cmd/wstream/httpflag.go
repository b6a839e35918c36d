package main

import (
	"fmt"
	"net"
	"strings"

	"github.com/urfave/cli/v2"
)

// httpFlag is the address of the listener that serves the web UI, the
// REST API and metrics.
var httpFlag = &cli.StringFlag{Name: "http", Value: "127.0.0.1:0",
	Usage: "serve the web UI, the REST API (/v1/) and metrics on `ADDR` (default a free port on 127.0.0.1, printed at start; \"off\" or \"\" serves none)"}

// httpAddr is --http checked: "" when it is off.
func httpAddr(c *cli.Context) (string, error) {
	a := strings.TrimSpace(c.String("http"))
	if a == "" || a == "off" {
		return "", nil
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", usageError{fmt.Errorf("--http %q: want HOST:PORT, such as 127.0.0.1:8081 (or off)", a)}
	}
	return a, nil
}

// loopback reports whether addr binds to a loopback address only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
