// CoreDNS with only the plugins the e2e real-node cluster uses.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// The plugins above in CoreDNS's execution order (its core/dnsserver/zdirectives.go).
func init() {
	dnsserver.Directives = []string{
		"bind", "ready", "health", "errors", "log", "cache", "template", "kubernetes",
	}
}

func main() {
	coremain.Run()
}
