package assemble

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// ownWrites returns the [bus.Dial.OnRefused] of node's client: a publish
// refused to a key of node in the applied or collect bucket
// ("$KV.<bucket>.<node>.…") is routine while the client's user is issued
// anew for a plan that names a new key (the client acts on the plan
// before its new user reaches the server; its apply is tried again with
// backoff): it is said at info level the first time for each subject, at
// debug level after. Any other refusal is said at error level, as the bus
// says it for a connection without OnRefused.
func ownWrites(log *slog.Logger, name, node string, issued bool) func(error) {
	var mu sync.Mutex
	said := map[string]bool{}
	own := []string{"$KV." + mesh.AppliedBucket + "." + node + ".", "$KV." + mesh.CollectBucket + "." + node + "."}
	return func(err error) {
		subject := refusedPublish(err.Error())
		if subject == "" || !strings.HasPrefix(subject, own[0]) && !strings.HasPrefix(subject, own[1]) {
			log.Error("bus: asynchronous error", "component", name, "err", err)
			return
		}
		mu.Lock()
		again := said[subject]
		said[subject] = true
		mu.Unlock()
		level := slog.LevelInfo
		if again {
			level = slog.LevelDebug
		}
		why := "its user is being issued anew for its new plan"
		if !issued {
			why = "its credentials do not allow this key of its new plan: the operator runs \"auth gen -f MESHFILE -o DIR --push URL\" and hands this node its new credentials file"
		}
		log.Log(context.Background(), level, "assemble: a write of the node's own record refused: "+why+"; the apply is tried again",
			"component", name, "subject", subject)
	}
}

// refusedPublish returns the subject of a refused publish the server
// names in text ("... Permissions Violation for Publish to \"S\""), or "".
func refusedPublish(text string) string {
	const to = `Publish to "`
	i := strings.Index(text, to)
	if i < 0 {
		return ""
	}
	rest := text[i+len(to):]
	j := strings.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return rest[:j]
}
