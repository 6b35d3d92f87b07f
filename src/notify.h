/*
 * Readiness for a service manager: the datagram protocol of sd_notify(3), without libsystemd.
 * Under a unit of Type=notify (tools/systemd/ucmfs@.service) systemd sets NOTIFY_SOCKET; the
 * daemon says READY=1 once it serves its mount and STOPPING=1 when it starts to stop, so units
 * ordered after it start only once the mount answers. Without NOTIFY_SOCKET nothing is sent.
 */
#ifndef UCM_NOTIFY_H
#define UCM_NOTIFY_H

/* Send `state` ("READY=1", ...) to $NOTIFY_SOCKET if set. 0, or -errno (logged by the caller
 * if it cares: the service manager then times the start out by itself). */
int notify_manager(const char *state);

#endif
