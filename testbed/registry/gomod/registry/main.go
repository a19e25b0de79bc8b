// A registry for the image-resolution tests: go-containerregistry's in-memory OCI
// distribution server (pkg/registry), on a loopback port of the kernel's choosing. The first
// line it prints is "listening on 127.0.0.1:PORT"; it serves until killed.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stdout, "listening on %s\n", listener.Addr())
	server := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: registry.New()}
	log.Fatal(server.Serve(listener))
}
