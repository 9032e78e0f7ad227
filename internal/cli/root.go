// Package cli holds the subcommands of the mesh-provisioner binary, one file
// each. The binary's main only calls [Run].
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/mesh-provisioner/mesh-provisioner/internal/bus"
)

// Run runs the command line args (without the program name) and returns the
// process's exit code: 0 on success, 1 on an error (printed to stderr), 2 on
// a usage error.
func Run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := Root()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mesh-provisioner:", err)
		var u usageError
		if errors.As(err, &u) {
			return 2
		}
		return 1
	}
	return 0
}

type usageError struct{ error }

// busFlags are the flags every subcommand that talks to a running mesh
// takes.
type busFlags struct {
	url   string
	creds string
	log   *slog.Logger // nil means slog.Default()
}

func (f *busFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "nats", "nats://127.0.0.1:4222", "URL of the mesh's NATS server")
	cmd.Flags().StringVar(&f.creds, "creds", "", "NATS credentials file")
}

// connect dials the bus as component name.
func (f *busFlags) connect(name string) (*nats.Conn, jetstream.JetStream, error) {
	log := f.log
	if log == nil {
		log = slog.Default()
	}
	return bus.Connect(bus.Dial{URL: f.url, Creds: f.creds, Name: name, Log: log})
}

// Root returns the root command with every subcommand.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:           "mesh-provisioner",
		Short:         "The provisioning control plane of a mesh of machines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	for _, add := range commands {
		root.AddCommand(add())
	}
	return root
}

// commands lists the constructors of the subcommands; each subcommand's
// file adds its own in an init function, so that files do not collide.
var commands []func() *cobra.Command
