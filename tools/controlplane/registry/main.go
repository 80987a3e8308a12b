// The CNCF distribution registry with only what the tier's registry (harness/registry.py)
// uses: the filesystem storage driver. Upstream's main (cmd/registry) also imports the
// Azure, GCS and S3 drivers, the auth plugins and the proxy, whose cloud SDKs would take
// most of its build time.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	// Execute reports a failed command itself and exits non-zero.
	_ = registry.RootCmd.Execute()
}
