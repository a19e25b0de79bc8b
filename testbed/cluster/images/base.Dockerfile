# The base the node's images are built on, in place of the public python:3.11-slim (no image registry
# is reachable here): a Debian 12 root filesystem from Debian's own packages (mmdebstrap: Python 3.11,
# its venv module, CA certificates), made by testbed/cluster/images.py.
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
CMD ["python3"]
