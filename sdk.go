// Package wstream carries the sources that `wstream init` writes into a new
// operator project, so that the project builds offline, outside this
// repository: the guest SDK of every language and the abi package the Go
// SDK imports. The files are embedded from where they live (guest-sdk/,
// abi/), so there is one copy of each.
package wstream

import "embed"

// SDK holds the guest SDKs' sources under their repository paths:
// abi/*.go, guest-sdk/go/wstream/*.go, guest-sdk/c/wstream.{h,c},
// guest-sdk/rust/src/*.rs, guest-sdk/assemblyscript/assembly/*.ts and
// guest-sdk/assemblyscript/package.json (which pins the compiler). Test
// files are included by the patterns; the project package leaves them out.
//
//go:embed abi/*.go
//go:embed guest-sdk/go/wstream/*.go
//go:embed guest-sdk/c/wstream.h guest-sdk/c/wstream.c
//go:embed guest-sdk/rust/src/*.rs
//go:embed guest-sdk/assemblyscript/assembly/*.ts guest-sdk/assemblyscript/package.json
var SDK embed.FS
