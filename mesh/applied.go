package mesh

import "time"

// Applied is the value at <node>.<module> in [AppliedBucket], written by
// that node's client only (spec 8): what it applied of the module's plan.
// Dirs maps each directory's name to its absolute path on the node, Ports
// each port's name to its number (stable across restarts and plan changes),
// and Swept lists the files the client moved out of the module's sweep
// directories, each as its path in the quarantine folder. At is the time
// of the last change (RFC 3339, UTC); a record is re-written only when
// something but At changes.
type Applied struct {
	Fingerprint string            `json:"fp"`
	Dirs        map[string]string `json:"dirs"`
	Ports       map[string]int    `json:"ports"`
	Swept       []string          `json:"swept"`
	At          time.Time         `json:"at"`
	// Problems says, for a plan applied in part, what was not applied and
	// why (a folder under the node's root that is a symlink or not a
	// directory is never followed nor used), one item each; absent when the
	// whole plan was applied. Not in spec 8's record: an addition.
	Problems []string `json:"problems,omitempty"`
	// Credentials holds, for each credential key the module's rendered
	// templates hold a value of, the generation they hold; Reloaded
	// reports whether the manifest's reload ran since they were rendered
	// (false while it waits for the providers to hold that generation, or
	// when it failed: said in Problems). Absent for a module with no
	// templates. Not in spec 8's record: an addition.
	Credentials map[string]int64 `json:"credentials,omitempty"`
	Reloaded    bool             `json:"reloaded,omitempty"`
}

// CollectItem is the value at a [CollectKey] in [CollectBucket], written by
// the contributor's node's client only: one item of a collection of the
// node. Module is the contributing module (the key's contributor);
// Collection is the collection's name, unescaped.
type CollectItem struct {
	Item       string `json:"item"`
	Module     string `json:"module"`
	Collection string `json:"collection"`
}
