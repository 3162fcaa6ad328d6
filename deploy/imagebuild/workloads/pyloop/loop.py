"""The Python workload the cluster's end-to-end test profiles in the OpenTelemetry profiler
mode: a known chain of Python functions (main -> run -> outer -> middle -> leaf) on CPython,
spinning until SIGTERM or SIGINT."""
import signal
import sys

stop = False


def on_signal(signum, frame):
    global stop
    stop = True


def leaf(n):
    x = n
    for _ in range(100000):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
    return x


def middle(n):
    return leaf(n + 1) ^ n


def outer(n):
    return middle(n * 3) + 1


def run():
    n, total = 0, 0
    while not stop:
        total += outer(n)
        n += 1
    return total


def main():
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("pyloop: spinning in main -> run -> outer -> middle -> leaf", flush=True)
    run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
