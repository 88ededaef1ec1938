"""Leasehold's admin shows exact UTC timestamps to the second on every page (bug 12).

Django's English locale formats datetimes as "Dec. 1, 2026, 7:29 a.m." (minutes,
no zone) on detail pages while Leasehold's lists print `2026-12-01 07:29:04`;
this format module (settings.FORMAT_MODULE_PATH) makes them one format. The
server's time zone is UTC (settings.TIME_ZONE), so `T` prints "UTC".
"""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i:s T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
DATETIME_INPUT_FORMATS = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M"]
