package vault_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus/bustest"
	"github.com/mesh-provisioner/mesh-provisioner/internal/vault"
	"github.com/mesh-provisioner/mesh-provisioner/kit"
	"github.com/mesh-provisioner/mesh-provisioner/mesh"
)

// A full disk does not take the vault down: a credential whose value
// cannot be written is failed with the disk's error and provided once
// space returns (the vault's other credentials stay provided and
// answered); a vault restarted over a log whose last record is torn (a
// write cut short) starts, says what it dropped, and provides again.
func TestVaultOnAFullDisk(t *testing.T) {
	f := start(t)
	disk := bustest.SmallDisk(t, 64<<10)
	f.dir = filepath.Join(disk, "vault")
	f.startVault(t)
	_, first := f.need(gitea, "main")
	waitProvided(t, f.seat, first, 1)
	before, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{})

	// Fill the disk, the log's last page with it.
	filler, err := os.Create(filepath.Join(disk, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 512)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	filler.Close()
	var keys []mesh.ProvisionKey
	for i := range 40 {
		_, k := f.need(mesh.Ref{Module: fmt.Sprintf("app%d", i), Node: "ace"}, "")
		keys = append(keys, k)
	}
	var failed mesh.ProvisionKey
	bustest.WaitFor(t, 0, "a credential failed with ENOSPC", func() bool {
		for _, k := range keys {
			if p, ok := f.seat.Get(k); ok && p.State == mesh.Failed && strings.Contains(p.Why, "no space left on device") {
				failed = k
				return true
			}
		}
		return false
	})
	if after, _ := ask(t, f, "gitea", "gitea", false, kit.VaultRequest{}); fmt.Sprint(values(after)) != fmt.Sprint(values(before)) {
		t.Errorf("gitea on a full disk gets %v; want %v", values(after), values(before))
	}

	if err := os.Remove(filepath.Join(disk, "filler")); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		waitProvided(t, f.seat, k, 1)
	}

	// A record cut short, as a crash in the middle of a write leaves it.
	f.stop()
	store := filepath.Join(f.dir, vault.StoreFile)
	log, err := os.OpenFile(store, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(log, `{"name":"%s","generation":2,"sealed":"AAAA`, failed)
	log.Close()
	f.startVault(t)
	if !f.said.Has("cut short by a write never acknowledged", failed.String(), "generation=1") {
		t.Errorf("the restarted vault said:\n%s\nwant the torn record of %s dropped, generation 1 kept", f.said.Lines(), failed)
	}
	_, more := f.need(mesh.Ref{Module: "late", Node: "ace"}, "")
	waitProvided(t, f.seat, more, 1)
	waitProvided(t, f.seat, failed, 1)
}
