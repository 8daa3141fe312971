// The tiny app of `make kind-test` (tests/kind/README.md): one static binary, no dependencies,
// built with CGO_ENABLED=0 into a FROM scratch image by hack/kind-app.sh.
//
//	kind-app serve   HTTP on $APP_LISTEN (default :8080); GET / answers one line:
//	                 env=<$APP_VALUE> secret=<$APP_SECRET_FILE> projected=<$APP_PROJECTED_FILE> pod=<hostname>
//	                 (the files are read on every request, so the answer is what the pod sees now;
//	                 the env var is fixed when the process starts, so only a new pod changes it)
//	kind-app get URL fetch URL (retried for up to 60 s), print the body: the DNS + Service check
//	kind-app sleep   do nothing until SIGTERM (the "unrelated" workload)
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func readFile(env, def string) string {
	path := os.Getenv(env)
	if path == "" {
		path = def
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return strings.TrimSpace(string(b))
}

func serve() error {
	addr := os.Getenv("APP_LISTEN")
	if addr == "" {
		addr = ":8080"
	}
	host, _ := os.Hostname()
	value := os.Getenv("APP_VALUE")
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "env=%s secret=%s projected=%s pod=%s\n", value,
			readFile("APP_SECRET_FILE", "/etc/app-secret/value"),
			readFile("APP_PROJECTED_FILE", "/etc/app-projected/value"), host)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	// SIGTERM: stop at once (the pod is being replaced; nothing to drain in a test app).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		return err
	}
	return nil
}

func get(url string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				os.Stdout.Write(body)
				return nil
			}
			err = fmt.Errorf("status %d, %v", resp.StatusCode, rerr)
		}
		if time.Now().After(deadline) {
			return err
		}
		fmt.Fprintf(os.Stderr, "get %s: %v (retrying)\n", url, err)
		time.Sleep(time.Second)
	}
}

func main() {
	var err error
	switch {
	case len(os.Args) >= 2 && os.Args[1] == "serve":
		err = serve()
	case len(os.Args) >= 3 && os.Args[1] == "get":
		err = get(os.Args[2])
	case len(os.Args) >= 2 && os.Args[1] == "sleep":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		<-ctx.Done()
		stop()
	default:
		err = fmt.Errorf("usage: kind-app serve | get URL | sleep")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kind-app:", err)
		os.Exit(1)
	}
}
