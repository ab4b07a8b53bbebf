package main

import "syscall"

// sysProcAttr makes the kernel kill the child if the harness dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
