package main

// This file holds instance 1's side of the processes: starting the readers,
// reading their reports, stopping them, and printing.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/hybridcache/hybridcache/hybrid"
)

// printStats prints an instance's main counters, and its errors if any.
func printStats(out io.Writer, id int, s hybrid.Stats) {
	fmt.Fprintf(out, "  instance %d: L1.Hits %d  L2.Hits %d  Load.Calls %d  Sent %d  Applied %d  Own %d  Swapped %d\n",
		id, s.L1.Hits, s.L2.Hits, s.Load.Calls, s.Invalidations.Sent, s.Invalidations.Applied, s.Invalidations.Own, s.Invalidations.Swapped)
	if s.Invalidations.Unauthentic+s.Invalidations.Invalid+s.Bus.Losses+s.L2.Errors+s.Invalidations.PublishErrors > 0 {
		fmt.Fprintf(out, "    Unauthentic %d  Invalid %d  Bus.Losses %d  L2.Errors %d  PublishErrors %d\n",
			s.Invalidations.Unauthentic, s.Invalidations.Invalid, s.Bus.Losses, s.L2.Errors, s.Invalidations.PublishErrors)
	}
}

// reader is instance 1's handle on a reader process.
type reader struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	dec   *json.Decoder
}

// startReaders runs this program again as instances 2 and 3 and sends each
// its configuration. It returns the readers it started even with an error,
// for stopReaders. When ctx ends it closes their stdin, which stops them.
func startReaders(ctx context.Context, cfg config, errOut io.Writer) ([]*reader, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var rs []*reader
	for range 2 {
		r := &reader{cmd: exec.Command(exe)}
		r.cmd.Env = append(os.Environ(), roleEnv+"=reader")
		r.cmd.Stderr = errOut
		stdout, err := r.cmd.StdoutPipe()
		if err != nil {
			return rs, err
		}
		if r.stdin, err = r.cmd.StdinPipe(); err != nil {
			return rs, err
		}
		if err := r.cmd.Start(); err != nil {
			return rs, err
		}
		r.dec = json.NewDecoder(stdout)
		rs = append(rs, r)
		if err := json.NewEncoder(r.stdin).Encode(cfg); err != nil {
			return rs, err
		}
	}
	context.AfterFunc(ctx, func() {
		for _, r := range rs {
			r.stdin.Close()
		}
	})
	return rs, nil
}

// next returns the reader's next report. A reader silent for 15 seconds
// is killed (by its pid), which ends the wait.
func (r *reader) next() (report, error) {
	kill := time.AfterFunc(15*time.Second, func() { r.cmd.Process.Kill() })
	defer kill.Stop()
	var rep report
	if err := r.dec.Decode(&rep); err != nil {
		return rep, fmt.Errorf("reader (pid %d): %w", r.cmd.Process.Pid, err)
	}
	return rep, nil
}

// stopReaders closes each reader's stdin, which makes it report its Stats,
// close its cache, bus and client and exit, and waits for it.
func stopReaders(rs []*reader, out, errOut io.Writer) {
	for _, r := range rs {
		r.stdin.Close()
	}
	clean := 0
	for i, r := range rs {
		for {
			rep, err := r.next() // the reports left unread, if the run stopped early
			if err != nil {
				break
			}
			if rep.Stats != nil {
				printStats(out, i+2, *rep.Stats)
			}
		}
		if err := r.cmd.Wait(); err != nil {
			fmt.Fprintf(errOut, "instance %d (pid %d): %v\n", i+2, r.cmd.Process.Pid, err)
			continue
		}
		clean++
	}
	if len(rs) > 0 {
		fmt.Fprintf(out, "\n%d of %d readers closed their cache and bus and exited\n", clean, len(rs))
	}
}

// micros formats d in whole microseconds.
func micros(d time.Duration) string { return fmt.Sprintf("%dµs", d.Microseconds()) }
