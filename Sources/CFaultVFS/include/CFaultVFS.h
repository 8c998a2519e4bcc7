#ifndef ASKRELAY_CFAULTVFS_H
#define ASKRELAY_CFAULTVFS_H

// A fault-injecting SQLite VFS for tests (docs/reliability.md, "Power loss"). Its code exists only when
// ASKRELAY_FAULT_VFS is defined, which Package.swift does for debug builds alone: a release build compiles this
// target to an empty object and the SQLite wrapper never calls it.
//
// Installs the VFS as the process's default if the environment variable ASKRELAY_FAULT_VFS holds a spec.
// Returns 0 when the variable is unset or empty, 1 when installed. A malformed spec prints one line naming the
// bad item and exits the process with 64.
int askrelay_fault_vfs_install_from_environment(void);

// Tells the VFS that the directory `directory` was fsynced: files created in it are no longer lost by a power cut.
void askrelay_fault_vfs_directory_synced(const char *directory);

#endif
